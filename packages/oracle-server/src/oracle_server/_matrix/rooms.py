"""Users' Matrix ids and rooms (SRV-67, SRV-69).

An IXO user ``did:ixo:ixo1abc`` is ``@did-ixo-ixo1abc:<homeserver>`` on Matrix, and their
room with this oracle has the alias ``#<userDid>_<entityDid>:<oracle's homeserver>``
(``:`` → ``-`` in both DIDs). The room is resolved through its alias, and created
(encrypted, the user invited) when it does not exist yet.

Aliases always resolve on the oracle's own homeserver: an alias on another server is
whatever that server says it is, and a request (or a sender) naming a homeserver must
not be able to point the oracle at a room someone else controls.
"""

from __future__ import annotations

import asyncio
import logging
import re

from oracle_server._matrix.client import MatrixClient, MatrixError

__all__ = ["UserRooms", "did_from_matrix_user", "matrix_user_id", "user_room_alias"]

logger = logging.getLogger("oracle.server.matrix")

# Matrix user-id localparts: lowercase letters, digits and ._=-/+ only.
_LOCALPART = re.compile(r"[a-z0-9._=\-/+]+")


def matrix_user_id(user_did: str, server_name: str) -> str | None:
    """The user's Matrix id, or ``None`` when their DID has no valid Matrix form.

    ``did:ixo:ixo1abc`` → ``@did-ixo-ixo1abc:<server_name>``. DIDs with characters a
    Matrix localpart cannot hold (``did:key`` is base58, mixed case) have none: lowering
    the case would not be one-to-one, and inviting the wrong person is worse than
    inviting nobody.
    """
    localpart = user_did.replace(":", "-")
    if not _LOCALPART.fullmatch(localpart):
        return None
    return f"@{localpart}:{server_name}"


def did_from_matrix_user(user_id: str) -> str | None:
    """``@did-ixo-ixo1abc:hs`` → ``did:ixo:ixo1abc``; ``None`` for other users."""
    localpart = user_id.removeprefix("@").partition(":")[0]
    method, sep, rest = localpart.removeprefix("did-").partition("-")
    if not localpart.startswith("did-") or not sep or not method or not rest:
        return None
    return f"did:{method}:{rest}"


def user_room_alias(user_did: str, entity_did: str, home_server: str) -> str:
    """``#<userDid>_<entityDid>:<home_server>`` with ``:`` → ``-`` in both DIDs."""
    return f"#{user_room_localpart(user_did, entity_did)}:{home_server}"


def user_room_localpart(user_did: str, entity_did: str) -> str:
    """The alias localpart of the user's room with this oracle."""
    return f"{user_did.replace(':', '-')}_{entity_did.replace(':', '-')}"


class UserRooms:
    """Finds (and creates) each user's room with this oracle; room ids are cached.

    Args:
        client: The oracle's Matrix client.
        entity_did: ``ORACLE_ENTITY_DID``.
        oracle_name: Shown as the name of rooms the oracle creates.
    """

    def __init__(self, client: MatrixClient, *, entity_did: str, oracle_name: str) -> None:
        self.client = client
        self.entity_did = entity_did
        self.oracle_name = oracle_name
        self._cache: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def user_did(self, sender: str) -> str | None:
        """The DID a Matrix sender speaks for, or ``None``.

        Only users of a trusted homeserver (``MATRIX_TRUSTED_HOMESERVERS``) map to a DID:
        anyone can run a homeserver and register ``@did-ixo-<victim>`` on it.
        """
        user_did = did_from_matrix_user(sender)
        if user_did is None:
            return None
        if not self.client.is_trusted(sender):
            logger.warning(
                "matrix.sender_untrusted: ignored a message from server %r, which is not "
                "trusted; list it in MATRIX_TRUSTED_HOMESERVERS to accept its users",
                sender.partition(":")[2],
            )
            return None
        return user_did

    async def find(self, user_did: str) -> str | None:
        """The user's room id, or ``None`` when the room does not exist."""
        alias = user_room_alias(user_did, self.entity_did, self.client.server_name)
        cached = self._cache.get(alias)
        if cached is not None:
            return cached
        room_id = await self.client.resolve_alias(alias)
        if room_id is not None:
            self._cache[alias] = room_id
        return room_id

    def member_server(self, requested: str | None) -> str:
        """Where the user's account is: the request's homeserver if trusted, else ours."""
        requested = (requested or "").strip()
        if requested and requested in self.client.trusted_homeservers:
            return requested
        return self.client.server_name

    async def ensure(self, user_did: str, home_server: str | None = None) -> str:
        """The user's room id, creating the room (encrypted, user invited) if missing.

        Args:
            user_did: The user.
            home_server: The homeserver the request names for the user's account; the
                account there is invited when the server is trusted. The room itself
                always lives on the oracle's homeserver.

        Raises:
            MatrixError: the homeserver failed.
        """
        alias = user_room_alias(user_did, self.entity_did, self.client.server_name)
        async with self._locks.setdefault(alias, asyncio.Lock()):
            room_id = await self.find(user_did)
            if room_id is not None:
                return room_id
            try:
                room_id = await self.client.create_room(
                    alias_localpart=user_room_localpart(user_did, self.entity_did),
                    name=self.oracle_name,
                    encrypted=True,
                )
            except MatrixError as exc:
                if exc.code != "M_ROOM_IN_USE":
                    raise
                # Created meanwhile by the user's client or another replica.
                room_id = await self.client.resolve_alias(alias)
                if room_id is None:
                    raise
            else:
                await self._invite(room_id, user_did, self.member_server(home_server))
            self._cache[alias] = room_id
            return room_id

    async def _invite(self, room_id: str, user_did: str, server: str) -> None:
        # A user who has no Matrix account yet cannot be invited; the room still serves
        # as the oracle's record, and the user's client can join it later.
        member = matrix_user_id(user_did, server)
        if member is None:
            return
        try:
            await self.client.invite(room_id, member)
        except MatrixError as exc:
            if exc.transient:
                raise
            logger.info("matrix.invite_skipped: %s", exc.code)
            return
        # The first messages are encrypted for the members the client knows of: wait
        # for the sync that shows the invite, so the invited user gets the room key.
        await self.client.wait_for_member(room_id, member)
