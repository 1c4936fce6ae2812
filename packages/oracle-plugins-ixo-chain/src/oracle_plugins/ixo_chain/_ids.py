"""Accounts and ids: what may reach a query, checked before it is written into one.

Every value the model gives is matched here against its kind's pattern; only a
``CheckedId`` (made by these functions) can be written into a GraphQL document or a
REST path, so nothing unvalidated reaches Blocksync or the chain gateway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CheckedId",
    "IdError",
    "check_account",
    "check_claim_id",
    "check_collection_id",
    "check_cursor",
    "check_did",
    "check_entity_id",
    "check_tx_hash",
    "is_valid_address",
    "user_address",
]

_BECH32_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BECH32_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
# 20-byte accounts carry 32 data characters, 32-byte ones (contracts, module accounts)
# 52; both end with a 6-character checksum.
_ADDRESS = re.compile(r"ixo1([02-9ac-hj-np-z]{38}|[02-9ac-hj-np-z]{58})")
_CLAIM_ID = re.compile(r"[A-Za-z0-9_-]{4,128}")
_COLLECTION_ID = re.compile(r"[0-9]{1,20}")
_ENTITY_ID = re.compile(r"did:ixo:entity:[A-Za-z0-9]{1,64}")
_DID = re.compile(r"did:ixo:(?:entity:)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_TX_HASH = re.compile(r"[0-9A-Fa-f]{64}")
# PostGraphile cursors are base64 of a small JSON array.
_CURSOR = re.compile(r"[A-Za-z0-9+/_-]{1,400}={0,2}")


class IdError(ValueError):
    """A value that does not match its kind's pattern; the message is for the model."""


@dataclass(frozen=True)
class CheckedId:
    """A value that matched its pattern. Only these are written into a query.

    Attributes:
        value: The normalised value (addresses lower case, hashes upper case).
        kind: What it is, e.g. ``"account"``.
    """

    value: str
    kind: str


def _polymod(values: list[int]) -> int:
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for bit, generator in enumerate(_BECH32_GENERATOR):
            if (top >> bit) & 1:
                checksum ^= generator
    return checksum


def is_valid_address(text: str) -> bool:
    """Whether ``text`` is an ``ixo1…`` bech32 address with a correct checksum."""
    if not _ADDRESS.fullmatch(text):
        return False
    hrp, data = text[:3], text[4:]
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    return _polymod(expanded + [_BECH32_CHARSET.index(c) for c in data]) == 1


def check_account(value: str) -> CheckedId:
    """An ``ixo1…`` address or ``did:ixo:ixo1…`` DID, as the address.

    Raises:
        IdError: Neither form, or a wrong checksum.
    """
    text = value.strip()
    address = text.removeprefix("did:ixo:")
    lowered = address.lower()
    # Bech32 is either all lower or all upper case; mixed case is a typo.
    if address not in (lowered, address.upper()) or not is_valid_address(lowered):
        raise IdError(
            "an account must be an ixo1… address or a did:ixo:ixo1… DID with a valid checksum"
        )
    return CheckedId(lowered, "account")


def user_address(did: str) -> str | None:
    """The user's account: the suffix of a ``did:ixo:ixo1…`` DID; ``None`` for others."""
    if not did.startswith("did:ixo:ixo1"):
        return None
    try:
        return check_account(did).value
    except IdError:
        return None


def _match(pattern: re.Pattern[str], value: str, kind: str, what: str) -> CheckedId:
    text = value.strip()
    if not pattern.fullmatch(text):
        raise IdError(what)
    return CheckedId(text, kind)


def check_claim_id(value: str) -> CheckedId:
    """A claim id (a CID-like hash: letters, digits, ``-``, ``_``)."""
    return _match(_CLAIM_ID, value, "claim", "a claim id is 4 to 128 letters, digits, - or _")


def check_collection_id(value: str) -> CheckedId:
    """A claim collection id (digits, e.g. ``8250``)."""
    return _match(_COLLECTION_ID, value, "collection", "a collection id is digits, e.g. 8250")


def check_entity_id(value: str) -> CheckedId:
    """An entity DID, ``did:ixo:entity:…``."""
    return _match(
        _ENTITY_ID, value, "entity", "an entity id is did:ixo:entity: followed by letters/digits"
    )


def check_did(value: str) -> CheckedId:
    """A ``did:ixo:…`` DID (a user's ``did:ixo:ixo1…`` or an entity's)."""
    text = value.strip()
    if text.lower().startswith("did:ixo:ixo1"):
        return CheckedId("did:ixo:" + check_account(text).value, "did")
    return _match(_DID, text, "did", "a DID here is did:ixo:… (did:ixo:ixo1… or did:ixo:entity:…)")


def check_tx_hash(value: str) -> CheckedId:
    """A transaction hash: 64 hex characters, upper-cased as the chain writes it."""
    checked = _match(_TX_HASH, value, "hash", "a transaction hash is 64 hex characters")
    return CheckedId(checked.value.upper(), "hash")


def check_cursor(value: str) -> CheckedId:
    """An ``after`` cursor as returned in ``endCursor``."""
    return _match(_CURSOR, value, "cursor", "after must be an endCursor from an earlier answer")
