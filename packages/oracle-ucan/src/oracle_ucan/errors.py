"""Error types of oracle-ucan. Decoding raises only these; validators never raise."""

from __future__ import annotations

from typing import Literal

__all__ = [
    "DidResolutionError",
    "ErrorCode",
    "InvalidFormat",
    "NotHandled",
    "SignatureError",
    "UcanError",
]

ErrorCode = Literal[
    "INVALID_FORMAT",
    "INVALID_SIGNATURE",
    "UNAUTHORIZED",
    "REPLAY",
    "EXPIRED",
    "CAVEAT_VIOLATION",
]


class UcanError(Exception):
    """Base of every error this package raises; ``code`` is a stable validation code."""

    code: ErrorCode = "INVALID_FORMAT"

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidFormat(UcanError, ValueError):
    """Bytes or text that are not a well-formed varint, CID, DAG-CBOR block, CAR or UCAN."""

    code: ErrorCode = "INVALID_FORMAT"


class SignatureError(UcanError):
    """A signature that does not verify, or a key type that cannot verify."""

    code: ErrorCode = "INVALID_SIGNATURE"


class DidResolutionError(UcanError):
    """A DID that could not be resolved to verification keys."""

    code: ErrorCode = "UNAUTHORIZED"


class NotHandled(DidResolutionError):
    """A resolver that does not handle the DID's method; the composite tries the next."""
