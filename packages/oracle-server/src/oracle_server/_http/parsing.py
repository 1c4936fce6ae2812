"""Untrusted request input to values: JSON bodies and integers in queries and headers.

Numbers are where lenient parsing turns bad input into a 500: ``int("²")`` raises,
``json.loads`` reads ``NaN``, ``Infinity`` and ``1e400`` (an infinite float), and a
4,000-digit integer overflows the database driver. So every number a request carries goes
through here: integers are ASCII digits within bounds, JSON floats are finite, JSON
integers fit in 64 bits; anything else answers 400 with the code ``request.bad_number``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from oracle_server._errors import HTTPError

__all__ = [
    "BAD_JSON",
    "BAD_NUMBER",
    "JSON_INTEGER_BOUND",
    "MAX_SAFE_INTEGER",
    "bounded_int",
    "json_body_errors",
    "parse_json",
    "query_int",
]

BAD_NUMBER = "request.bad_number"
"""The ``code`` of a 400 answering a number out of bounds or not written in ASCII digits."""
BAD_JSON = "request.bad_json"
"""The ``code`` of a 400 answering a body that is not JSON."""
MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer a JavaScript client holds exactly: the default bound of a query."""
JSON_INTEGER_BOUND = 2**63
"""JSON integers in bodies stay strictly inside ``±JSON_INTEGER_BOUND`` (64-bit storage)."""


def _bad_number(name: str, minimum: int, maximum: int) -> HTTPError:
    return HTTPError(
        400, [f"{name} must be an integer from {minimum} to {maximum}"], code=BAD_NUMBER
    )


def bounded_int(text: str, name: str, *, minimum: int = 0, maximum: int = MAX_SAFE_INTEGER) -> int:
    """``text`` as an integer written in ASCII digits, from ``minimum`` to ``maximum``.

    Signs, spaces, underscores and non-ASCII digits (``²``, ``٣``) are refused, and the
    length is checked before conversion, so no input makes ``int`` slow or raise.

    Args:
        text: The raw value, e.g. a query parameter.
        name: What the value is, for the message.
        minimum: The smallest allowed value (at least 0).
        maximum: The largest allowed value.

    Raises:
        HTTPError: 400 with ``code`` ``request.bad_number``.
    """
    if not (0 < len(text) <= len(str(maximum)) and text.isascii() and text.isdigit()):
        raise _bad_number(name, minimum, maximum)
    value = int(text)
    if not minimum <= value <= maximum:
        raise _bad_number(name, minimum, maximum)
    return value


def query_int(
    params: Mapping[str, str],
    name: str,
    *,
    default: int,
    minimum: int = 0,
    maximum: int = MAX_SAFE_INTEGER,
) -> int:
    """The query parameter ``name`` as a bounded integer; ``default`` when absent or empty.

    Raises:
        HTTPError: 400 with ``code`` ``request.bad_number`` (see :func:`bounded_int`).
    """
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    return bounded_int(raw, name, minimum=minimum, maximum=maximum)


class _NumberRefusedError(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NumberRefusedError(f"body numbers must be finite; {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberRefusedError(f"body numbers must be finite; {text[:20]} is out of range")
    return value


def _bounded_json_int(text: str) -> int:
    # Checked on the text: a 4,000-digit literal is refused before it is converted.
    digits = text.removeprefix("-")
    if len(digits) > len(str(JSON_INTEGER_BOUND)) or abs(int(text)) >= JSON_INTEGER_BOUND:
        raise _NumberRefusedError(
            f"body integers must lie strictly between -2^63 and 2^63; {text[:20]}… does not"
        )
    return int(text)


def parse_json(body: bytes) -> Any:
    """Decode a JSON request body; an empty body is ``{}``.

    Raises:
        HTTPError: 400 ``request.bad_json`` for a body that is not JSON, 400
            ``request.bad_number`` for ``NaN``, ``Infinity``, a float that overflows or
            an integer beyond 64 bits.
    """
    if not body.strip():
        return {}
    try:
        return json.loads(
            body,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_json_int,
        )
    except _NumberRefusedError as exc:
        raise HTTPError(400, [str(exc)], code=BAD_NUMBER) from exc
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise HTTPError(400, ["body must be valid JSON"], code=BAD_JSON) from exc


def json_body_errors(errors: Sequence[Any]) -> list[str]:
    """pydantic errors as the flat message list the client shows (SRV-15)."""
    messages = []
    for err in errors:
        field = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        messages.append(f"{field} {err.get('msg', 'is invalid')}".strip())
    return messages
