"""The compact DAG-JSON that UCAN signatures cover (UCAN-9).

Keys sorted by UTF-16 code unit at every depth (JavaScript's order), no whitespace, bytes
as ``{"/": {"bytes": "<unpadded base64>"}}``, links as ``{"/": "<cid>"}`` and numbers as
JavaScript prints them, so that signing inputs match ucanto's byte for byte.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from multiformats.cid import CID

from oracle_ucan.errors import InvalidFormat

__all__ = ["encode", "js_number"]

_string = json.encoder.encode_basestring  # a JSON string literal, non-ASCII kept as is
_MAX_EXACT = 2**53


def _key(key: str) -> bytes:
    # JavaScript sorts strings by UTF-16 code unit; UTF-16-BE bytes compare the same way.
    return key.encode("utf-16-be")


def js_number(value: float) -> str:
    """``value`` as JavaScript's ``Number#toString`` prints it, with ``@ipld/dag-json``'s
    ``.0`` on integral values too large to be exact integers.

    Raises:
        InvalidFormat: NaN or an infinity.
    """
    if not math.isfinite(value):
        raise InvalidFormat("NaN and infinities are not allowed in DAG-JSON")
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < _MAX_EXACT:
        return str(int(value))
    # repr gives the shortest digits that round-trip, as JavaScript does; only the
    # notation differs. `point` is where the decimal point falls within those digits.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)
    digits = digits.rstrip("0") or "0"
    if 0 < point <= 21:
        if len(digits) > point:
            text = f"{digits[:point]}.{digits[point:]}"
        else:
            text = digits + "0" * (point - len(digits))
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        power = point - 1
        fraction = f".{digits[1:]}" if len(digits) > 1 else ""
        text = f"{digits[0]}{fraction}e{'+' if power > 0 else '-'}{abs(power)}"
    if value.is_integer() and "e" not in text:
        text += ".0"
    return ("-" if value < 0 else "") + text


def _write(value: Any, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is bool:
        out.append("true" if value else "false")
    elif kind is int:
        out.append(str(value))
    elif value is None:
        out.append("null")
    elif kind is dict or isinstance(value, Mapping):
        _write_map(value, out)
    elif kind is list or kind is tuple:
        _write_list(value, out)
    elif kind is bytes:
        out.append('{"/":{"bytes":"' + base64.b64encode(value).rstrip(b"=").decode() + '"}}')
    elif kind is CID:
        out.append(f'{{"/":"{value}"}}')
    elif kind is float:
        out.append(js_number(value))
    else:
        raise InvalidFormat(f"cannot encode {kind.__name__} as DAG-JSON")


def _write_map(value: Mapping[Any, Any], out: list[str]) -> None:
    keys = list(value)
    if len(keys) > 1:  # a caveat map often has one key, and the sort key is costly
        keys.sort(key=_key)
    out.append("{")
    for index, key in enumerate(keys):
        if type(key) is not str:
            raise InvalidFormat("DAG-JSON map keys must be strings")
        if index:
            out.append(",")
        out.append(_string(key))
        out.append(":")
        item = value[key]
        if type(item) is str:  # the usual caveat values, without a call each
            out.append(_string(item))
        elif type(item) is int:
            out.append(str(item))
        else:
            _write(item, out)
    out.append("}")


def _write_list(value: Sequence[Any], out: list[str]) -> None:
    out.append("[")
    for index, item in enumerate(value):
        if index:
            out.append(",")
        _write(item, out)
    out.append("]")


def encode(value: Any) -> str:
    """Compact DAG-JSON text of ``value``.

    Raises:
        InvalidFormat: a value DAG-JSON cannot carry.
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out)
