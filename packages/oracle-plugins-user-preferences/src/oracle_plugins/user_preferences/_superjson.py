"""The subset of the JavaScript ``superjson`` format that a preferences object needs.

superjson (2.x) writes ``{"json": <plain JSON>, "meta"?: {"values": …, "v": 1}}``: ``json``
is the value with every non-JSON type turned into JSON, and ``meta.values`` says where
such values were and what they were, keyed by dotted path (``.`` and ``\\`` inside a key
are escaped with a backslash; an annotation on the root is a bare list). Preferences
hold strings only, but an older writer may have stored ``updatedAt`` as a ``Date``, and
``undefined`` fields show up too. Those, numbers that JSON cannot hold and ``bigint`` are
read; anything else (``Map``, ``Set``, classes, …) is refused rather than misread.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

__all__ = ["SuperJSONError", "js_iso_string", "superjson_dumps", "superjson_loads"]


class SuperJSONError(ValueError):
    """The text is not superjson, or uses a type this subset does not read."""


_UNDEFINED = object()


def js_iso_string(moment: datetime) -> str:
    """``moment`` as JavaScript's ``Date.prototype.toISOString`` prints it.

    Args:
        moment: An aware datetime (a naive one is taken as UTC).

    Returns:
        For example ``2025-06-01T10:00:00.000Z``: UTC, milliseconds, ``Z``.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    stamp = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _escape(key: str) -> str:
    return key.replace("\\", "\\\\").replace(".", "\\.")


def _split_path(path: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    chars = iter(path)
    for char in chars:
        if char == "\\":
            current.append(next(chars, ""))
        elif char == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _encode(value: Any, path: list[str], meta: dict[str, list[str]]) -> Any:
    if isinstance(value, datetime):
        meta[".".join(path)] = ["Date"]
        return js_iso_string(value)
    if isinstance(value, dict):
        return {str(k): _encode(v, [*path, _escape(str(k))], meta) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v, [*path, str(i)], meta) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise SuperJSONError(f"cannot write a {type(value).__name__} as superjson")


def superjson_dumps(value: Any) -> str:
    """Serialise ``value`` the way ``superjson.stringify`` does.

    Plain JSON values come out byte for byte as superjson 2.x writes them (compact
    separators, non-ASCII kept); ``datetime`` values become ``Date`` entries.

    Args:
        value: JSON-compatible data, possibly with ``datetime`` values.

    Returns:
        The superjson text.

    Raises:
        SuperJSONError: ``value`` holds a type this subset cannot write.
    """
    meta: dict[str, list[str]] = {}
    if isinstance(value, datetime):
        document: dict[str, Any] = {
            "json": js_iso_string(value),
            "meta": {"values": ["Date"], "v": 1},
        }
    else:
        document = {"json": _encode(value, [], meta)}
        if meta:
            document["meta"] = {"values": meta, "v": 1}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _revive(kind: Any, value: Any) -> Any:
    if kind == "Date":
        # Kept as the ISO string superjson stored: callers want text, and a JS Date
        # round-trips through that string unchanged.
        if not isinstance(value, str):
            raise SuperJSONError("a Date that is not an ISO string")
        return value
    if kind == "undefined":
        return _UNDEFINED
    if kind == "number":
        numbers = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "-0": -0.0}
        if value not in numbers:
            raise SuperJSONError("unknown special number")
        return numbers[value]
    if kind == "bigint":
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise SuperJSONError("a bigint that is not an integer") from exc
    raise SuperJSONError(f"superjson type {kind!r} is not supported here")


def _apply(root: Any, path: list[str], annotation: Any) -> Any:
    if not isinstance(annotation, list) or not annotation:
        raise SuperJSONError("malformed superjson meta")
    if len(annotation) > 1:
        raise SuperJSONError(f"superjson type {annotation[0]!r} is not supported here")
    if not path:
        return _revive(annotation[0], root)
    parent = root
    for part in path[:-1]:
        parent = _child(parent, part)
    last = path[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise SuperJSONError("superjson meta points at a missing key")
        revived = _revive(annotation[0], parent[last])
        if revived is _UNDEFINED:
            del parent[last]
        else:
            parent[last] = revived
    elif isinstance(parent, list):
        index = _index(parent, last)
        revived = _revive(annotation[0], parent[index])
        parent[index] = None if revived is _UNDEFINED else revived
    else:
        raise SuperJSONError("superjson meta points inside a scalar")
    return root


def _index(items: list[Any], part: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise SuperJSONError("superjson meta points at a missing index")
    return int(part)


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part)]
    raise SuperJSONError("superjson meta points at a missing value")


def superjson_loads(text: str | bytes) -> Any:
    """Parse superjson text, as ``superjson.parse`` does for the supported types.

    ``Date`` values are returned as their ISO strings; ``undefined`` object members are
    dropped (in arrays they become ``None``).

    Args:
        text: The superjson document.

    Returns:
        The value.

    Raises:
        SuperJSONError: not a superjson document, or it uses an unsupported type.
    """
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SuperJSONError("not JSON") from exc
    if not isinstance(document, dict) or "json" not in document:
        raise SuperJSONError("a superjson document is an object with a 'json' member")
    value = document["json"]
    meta = document.get("meta")
    if meta is None:
        return value
    if not isinstance(meta, dict):
        raise SuperJSONError("malformed superjson meta")
    annotations = meta.get("values")
    if annotations is None:
        return value
    if isinstance(annotations, list):
        result = _apply(value, [], annotations)
        return None if result is _UNDEFINED else result
    if not isinstance(annotations, dict):
        raise SuperJSONError("malformed superjson meta")
    for path, annotation in annotations.items():
        value = _apply(value, _split_path(path), annotation)
    return value
