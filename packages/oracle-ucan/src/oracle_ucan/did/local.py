"""DIDs whose keys the process already knows, consulted before any network lookup (UCAN-19).

The oracle registers its own ``did:ixo`` here with the key of its signing mnemonic, so
tokens it minted verify without a round trip to Blocksync, and tests and offline setups
can resolve any DID without a network.
"""

from __future__ import annotations

from oracle_ucan.did.key import did_key_from_multibase
from oracle_ucan.errors import InvalidFormat, NotHandled

__all__ = ["LocalResolver"]


class LocalResolver:
    """An in-memory table from DID to one Ed25519 key."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}

    def register(self, did: str, public_key_multibase: str) -> None:
        """Make ``did`` resolve to the Ed25519 key ``public_key_multibase``.

        Registering a DID again replaces its key.

        Args:
            did: Any DID, e.g. ``did:ixo:ixo1…``.
            public_key_multibase: base58btc (``z…``) of the multicodec key (``ed 01`` + 32
                bytes, i.e. a did:key without ``did:key:``) or of the bare 32-byte key.

        Raises:
            InvalidFormat: ``did`` is not a DID, or the key is not a base58btc Ed25519 key.
        """
        if not did.startswith("did:") or did.count(":") < 2:
            raise InvalidFormat(f"not a DID: {did[:60]!r}")
        did_key = did_key_from_multibase(public_key_multibase)
        if did_key is None:
            raise InvalidFormat(
                "public_key_multibase must be base58btc ('z…') of an Ed25519 public key"
            )
        self._keys[did] = did_key

    def unregister(self, did: str) -> None:
        """Forget ``did``; unknown DIDs are ignored."""
        self._keys.pop(did, None)

    async def resolve(self, did: str) -> list[str]:
        """``[did:key:…]`` of a registered DID.

        Raises:
            NotHandled: ``did`` is not registered.
        """
        did_key = self._keys.get(did)
        if did_key is None:
            raise NotHandled("DID not registered locally")
        return [did_key]
