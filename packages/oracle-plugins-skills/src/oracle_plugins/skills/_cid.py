"""Content addresses of capsule archives: CIDv1, raw codec, sha256, base32 multibase."""

from __future__ import annotations

import base64
import hashlib

__all__ = ["archive_cid"]

_CID_VERSION = 0x01
_RAW_CODEC = 0x55
_SHA2_256 = 0x12
_SHA2_256_LENGTH = 0x20
# Every prefix value above is below 0x80, so each varint is the single byte itself.
_PREFIX = bytes((_CID_VERSION, _RAW_CODEC, _SHA2_256, _SHA2_256_LENGTH))


def archive_cid(data: bytes) -> str:
    """The CIDv1 of ``data`` as raw bytes: ``b`` + base32 (lower case, unpadded).

    The same bytes always give the same ``bafkrei…`` string, so a consumer that fetched an
    archive can check it against the ``cid`` it was listed under, when the registry
    addresses archives this way (the test double does).

    Args:
        data: The archive's bytes, e.g. a capsule's ``.tar.gz``.

    Returns:
        For example ``bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e`` for
        ``b"hello world"``.
    """
    digest = hashlib.sha256(data).digest()
    encoded = base64.b32encode(_PREFIX + digest).decode("ascii")
    return "b" + encoded.lower().rstrip("=")
