"""Strict DAG-CBOR on cbor2.

Encoding is canonical: map keys sorted by encoded length then bytewise, shortest integers,
float64 only, definite lengths, CIDs as tag 42 over ``00 ‖ CID``. Decoding is strict:
indefinite lengths and duplicate keys are refused by cbor2, and everything else
non-canonical (unsorted keys, non-minimal integers, half or single floats, other tags,
``undefined``, non-string keys) is caught by re-encoding the decoded value and requiring
the very same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cbor2
from multiformats.cid import CID

from oracle_ucan.cid import parse_cid
from oracle_ucan.errors import InvalidFormat

__all__ = [
    "MAX_DEPTH",
    "decode",
    "encode",
    "keys_in_order",
    "link",
    "loads_exact",
    "sort_key",
    "text_keys",
    "walk",
]

MAX_DEPTH = 64
_LINK_TAG = 42
_INT_MIN = -(1 << 64)
_INT_MAX = (1 << 64) - 1
_PLAIN = frozenset({str, bytes, bool, type(None)})  # values _walk returns unchanged


def sort_key(key: str) -> tuple[int, bytes]:
    """DAG-CBOR map key order: by encoded length, then bytewise."""
    raw = key.encode()
    return len(raw), raw


def _prepare(value: Any, depth: int = 0) -> Any:
    # Exact type checks first: this runs on every block, and ABC isinstance is slow.
    kind = type(value)
    if kind is str or kind is bytes or kind is bool or value is None:
        return value
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidFormat("integer outside the 64-bit range of DAG-CBOR")
        return value
    if depth >= MAX_DEPTH:
        raise InvalidFormat("value nested too deeply")
    if kind is dict or isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidFormat("DAG-CBOR map keys must be strings")
            items.append((key, _prepare(item, depth + 1)))
        items.sort(key=lambda kv: sort_key(kv[0]))
        return dict(items)
    if kind is list or kind is tuple:
        return [_prepare(item, depth + 1) for item in value]
    if kind is CID:
        return cbor2.CBORTag(_LINK_TAG, b"\x00" + value.to_bytes())
    if kind is float:
        if not math.isfinite(value):
            raise InvalidFormat("NaN and infinities are not allowed in DAG-CBOR")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _prepare(int(value), depth)
    raise InvalidFormat(f"cannot encode {type(value).__name__} as DAG-CBOR")


def encode(value: Any) -> bytes:
    """Canonical DAG-CBOR bytes of ``value`` (dicts, lists, str, bytes, int, float, bool,
    ``None`` and ``CID`` links).

    Raises:
        InvalidFormat: a value DAG-CBOR cannot carry.
    """
    try:
        return cbor2.dumps(_prepare(value))
    except InvalidFormat:
        raise
    except (cbor2.CBORError, ValueError, TypeError, OverflowError) as exc:
        raise InvalidFormat(f"cannot encode as DAG-CBOR: {exc}") from exc


def _link(tag: cbor2.CBORTag) -> CID:
    payload = tag.value
    if type(payload) is not bytes or not payload or payload[0] != 0:
        raise InvalidFormat("a DAG-CBOR link must be bytes starting with 0x00")
    return parse_cid(payload[1:])


def _walk(value: Any, depth: int = 0) -> tuple[Any, bool]:
    """Check the decoded data model and turn tag-42 links into CIDs.

    Returns the value and whether it holds a float (whose width needs an exact check).
    """
    kind = type(value)
    if kind is str or kind is bytes or kind is bool or value is None:
        return value, False
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidFormat("integer outside the 64-bit range of DAG-CBOR")
        return value, False
    if kind is dict:
        return _walk_map(value, depth)
    if kind is list:
        return _walk_list(value, depth)
    if kind is cbor2.CBORTag:
        if value.tag != _LINK_TAG:
            raise InvalidFormat(f"CBOR tag {value.tag} is not allowed in DAG-CBOR")
        return _link(value), False
    if kind is float:
        if not math.isfinite(value):
            raise InvalidFormat("NaN and infinities are not allowed in DAG-CBOR")
        return value, True
    raise InvalidFormat(f"{kind.__name__} is not in the DAG-CBOR data model")


def text_keys(mapping: dict[Any, Any]) -> bool:
    """Whether every key of a decoded map is text, as DAG-CBOR requires.

    cbor2 reads integer, byte-string, array and map keys too, and the round trip of
    ``loads_exact`` keeps them; a caller reading a map without ``walk`` checks here.
    """
    return all(type(key) is str for key in mapping)


def _walk_map(value: dict[Any, Any], depth: int) -> tuple[dict[str, Any], bool]:
    if not text_keys(value):
        raise InvalidFormat("DAG-CBOR map keys must be strings")
    if len(value) > 1 and not keys_in_order(value):
        raise InvalidFormat("DAG-CBOR map keys are not in canonical order")
    floats = False
    for key, item in value.items():
        if type(item) in _PLAIN or (type(item) is int and _INT_MIN <= item <= _INT_MAX):
            continue  # the usual caveat and fact values: nothing to check or convert
        converted, has_float = _walk(item, depth + 1)
        floats |= has_float
        if converted is not item:
            value[key] = converted
    return value, floats


def _walk_list(value: list[Any], depth: int) -> tuple[list[Any], bool]:
    floats = False
    for index, item in enumerate(value):
        if type(item) in _PLAIN or (type(item) is int and _INT_MIN <= item <= _INT_MAX):
            continue
        converted, has_float = _walk(item, depth + 1)
        floats |= has_float
        if converted is not item:
            value[index] = converted
    return value, floats


def loads_exact(raw: bytes) -> Any:
    """Decode with cbor2 and require that re-encoding, key order kept, gives ``raw`` back.

    cbor2 writes shortest integers and lengths, float64 floats and definite lengths, and
    keeps a decoded map's key order; so the round trip proves everything canonical except
    the order and the type of map keys, which the caller checks (``walk``, or
    ``keys_in_order`` and ``text_keys``). Tag-42 links are still ``CBORTag``s.

    Raises:
        InvalidFormat: not CBOR, indefinite lengths, duplicate keys or non-minimal forms.
    """
    try:
        value = cbor2.loads(
            raw, allow_indefinite=False, allow_duplicate_keys=False, max_depth=MAX_DEPTH
        )
        same = cbor2.dumps(value) == raw
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise InvalidFormat(f"invalid DAG-CBOR: {exc}") from exc
    if not same:
        raise InvalidFormat("DAG-CBOR is not in canonical form")
    return value


def keys_in_order(mapping: dict[str, Any]) -> bool:
    """Whether a decoded map's keys are in DAG-CBOR order."""
    keys = list(mapping)
    return len(keys) < 2 or keys == sorted(keys, key=sort_key)


walk = _walk
link = _link


def decode(data: bytes) -> Any:
    """Decode strict DAG-CBOR; links become ``CID`` objects.

    The bytes must survive a cbor2 round trip unchanged (``loads_exact``) and every map's
    keys must be in DAG-CBOR order (``walk``).

    Raises:
        InvalidFormat: anything that is not canonical DAG-CBOR.
    """
    value, _ = _walk(loads_exact(bytes(data)))
    return value
