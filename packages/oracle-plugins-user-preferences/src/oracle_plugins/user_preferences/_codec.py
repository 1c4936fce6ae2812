"""The stored form of the preferences: ``{data: base64(zlib(superjson(prefs)))}``.

It is what the TypeScript runtime's Matrix state manager writes under ``ixo.room.state``
(Node's ``deflateSync``: zlib framing). Its older writer stored the superjson text itself
in ``data``; that legacy form is still read, and replaced by the compressed one on the
next write. The embedded SQLite store keeps the same ``data`` string.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Mapping
from typing import Any

from oracle_plugins.user_preferences._superjson import (
    SuperJSONError,
    superjson_dumps,
    superjson_loads,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "STATE_EVENT_TYPE",
    "STATE_KEY",
    "PreferencesFormatError",
    "decode_content",
    "decode_data",
    "encode_content",
    "encode_data",
]

STATE_EVENT_TYPE = "ixo.room.state"
"""Matrix state event type shared with the TypeScript runtime and the portal."""

STATE_KEY = "user_prefs"
"""State key of the preferences under ``STATE_EVENT_TYPE``."""

MAX_PAYLOAD_BYTES = 256 * 1024
"""Largest superjson text accepted when reading (a full record is about 3 KB)."""


class PreferencesFormatError(ValueError):
    """Stored content that is neither the compressed nor the legacy preferences form."""


def encode_data(record: Mapping[str, Any]) -> str:
    """``base64(zlib(superjson(record)))``, the ``data`` string of the stored content.

    Args:
        record: The preferences as stored (camelCase keys).

    Returns:
        Standard base64 with padding, as Node's ``Buffer.toString('base64')`` writes.
    """
    text = superjson_dumps(dict(record))
    return base64.b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def encode_content(record: Mapping[str, Any]) -> dict[str, str]:
    """The state event content for ``record``: ``{"data": encode_data(record)}``."""
    return {"data": encode_data(record)}


def _inflate(compressed: bytes) -> bytes:
    inflater = zlib.decompressobj()
    text = inflater.decompress(compressed, MAX_PAYLOAD_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise PreferencesFormatError("compressed preferences are truncated or too large")
    return text


def decode_data(data: str) -> Any:
    """Read a ``data`` string in the compressed form, else in the legacy one.

    Args:
        data: The stored string.

    Returns:
        The decoded value (normally a preferences object).

    Raises:
        PreferencesFormatError: neither form parses.
    """
    try:
        compressed: bytes | None = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        compressed = None
    text: bytes | None = None
    if compressed is not None:
        try:
            text = _inflate(compressed)
        except zlib.error:
            text = None
    if text is not None:
        try:
            return superjson_loads(text)
        except SuperJSONError as exc:
            raise PreferencesFormatError(
                f"compressed preferences are not superjson ({exc})"
            ) from None
    # Legacy: the superjson text itself. Not base64, or base64 of something that is not
    # zlib, which is how the TypeScript reader tells the two apart too.
    if len(data) > MAX_PAYLOAD_BYTES:
        raise PreferencesFormatError("stored preferences are too large")
    try:
        return superjson_loads(data)
    except SuperJSONError as exc:
        raise PreferencesFormatError(f"stored preferences are in no known form ({exc})") from None


def decode_content(content: Mapping[str, Any]) -> Any:
    """Decode the content of a ``user_prefs`` state event.

    Raises:
        PreferencesFormatError: ``data`` is missing, not a string, or unreadable.
    """
    data = content.get("data")
    if not isinstance(data, str):
        raise PreferencesFormatError("the state event has no 'data' string")
    return decode_data(data)
