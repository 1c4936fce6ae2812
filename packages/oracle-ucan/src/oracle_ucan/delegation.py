"""Delegations and invocations as ucanto archives them (UCAN-5, 11): CAR + variant root."""

from __future__ import annotations

import base64
import binascii
import re
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from multiformats.cid import CID

from oracle_ucan import dag_cbor
from oracle_ucan.car import MAX_CAR_BYTES, decode_car_parts, encode_car
from oracle_ucan.cid import cid_for, parse_cid
from oracle_ucan.errors import InvalidFormat
from oracle_ucan.ucan import UCAN_VERSION, Signer, Ucan, issue

__all__ = ["Delegation", "decode_base64", "delegate", "invoke"]

_VARIANT_RE = re.compile(r"^ucan@\d+\.\d+\.\d+$")
_WHITESPACE = re.compile(r"\s+")
MAX_TOKEN_CHARS = (MAX_CAR_BYTES * 4) // 3 + 8


def decode_base64(text: str) -> bytes:
    """Bytes of standard or URL-safe base64, padded or not, whitespace ignored (UCAN-3).

    Raises:
        InvalidFormat: oversized or not base64.
    """
    if len(text) > MAX_TOKEN_CHARS * 2:
        raise InvalidFormat("token is larger than the CAR size limit")
    if len(text) <= MAX_TOKEN_CHARS:
        try:  # the wire form: standard, padded, no whitespace (b64decode's validate=True)
            return binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            pass
    compact = _WHITESPACE.sub("", text).replace("-", "+").replace("_", "/")
    if len(compact) > MAX_TOKEN_CHARS:
        raise InvalidFormat("token is larger than the CAR size limit")
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidFormat("token is not base64") from exc


# {"ucan@0.9.1": <36-byte CID>}, up to the CID: the root block of every ucanto archive.
_VARIANT_HEAD = bytes.fromhex("a16a7563616e40302e392e31d82a582500")
_NOT_A_DELEGATION = "CAR archive does not contain a delegation"


def _variant_link(block: bytes) -> CID:
    """The UCAN link in an archive's root block; the usual ``{"ucan@0.9.1": <CID>}`` is
    read directly, anything else goes through the general decoder.

    Raises:
        InvalidFormat: not a ``{"ucan@<version>": <link>}`` map.
    """
    if len(block) == len(_VARIANT_HEAD) + 36 and block.startswith(_VARIANT_HEAD):
        return parse_cid(block[len(_VARIANT_HEAD) :])
    variant = dag_cbor.decode(block)
    if (
        not isinstance(variant, dict)
        or len(variant) != 1
        or not _VARIANT_RE.fullmatch(next(iter(variant)))
    ):
        raise InvalidFormat(_NOT_A_DELEGATION)
    link = next(iter(variant.values()))
    if not isinstance(link, CID):
        raise InvalidFormat(_NOT_A_DELEGATION)
    return link


class Delegation:
    """A UCAN plus the blocks it can reach (its proofs), as one archive.

    Invocations have the same shape: one capability, addressed to the service.
    """

    __slots__ = ("__weakref__", "_proof_cache", "_views", "blocks", "ucan")

    def __init__(
        self,
        ucan: Ucan,
        blocks: Mapping[CID, bytes] | None = None,
        views: dict[CID, weakref.ref[Delegation]] | None = None,
    ) -> None:
        self.ucan = ucan
        # Views over one archive share its block table; it is never written after this.
        self.blocks: dict[CID, bytes] = blocks if type(blocks) is dict else dict(blocks or {})
        cid = ucan.cid
        assert cid is not None
        if cid not in self.blocks:
            self.blocks = {**self.blocks, cid: ucan.block}
        # Below a UCAN with several proofs, views share a table of the proof views made so
        # far, so that a proof reached twice is one object (a chain that never forks needs
        # none). It holds the views weakly: a table of strong references, reachable from
        # every view, would make each decoded archive a reference cycle that only the
        # cyclic garbage collector could free.
        self._views: dict[CID, weakref.ref[Delegation]] | None = views
        self._proof_cache: list[Delegation | CID] | None = None

    @classmethod
    def _of_archive(
        cls, ucan: Ucan, blocks: dict[CID, bytes], views: dict[CID, weakref.ref[Delegation]] | None
    ) -> Delegation:
        """A view made while decoding an archive, whose verified ``blocks`` hold ``ucan``'s
        block: ``__init__``'s copy and membership check would be redundant."""
        view = cls.__new__(cls)
        view.ucan = ucan
        view.blocks = blocks
        view._views = views
        view._proof_cache = None
        return view

    def __repr__(self) -> str:
        return f"Delegation({self.cid}, iss={self.issuer!r}, aud={self.audience!r})"

    @property
    def cid(self) -> CID:
        """CID of the UCAN block."""
        assert self.ucan.cid is not None
        return self.ucan.cid

    @property
    def issuer(self) -> str:
        """``iss``."""
        return self.ucan.issuer

    @property
    def audience(self) -> str:
        """``aud``."""
        return self.ucan.audience

    @property
    def capabilities(self) -> tuple[Mapping[str, Any], ...]:
        """``att``."""
        return self.ucan.capabilities

    @property
    def expiration(self) -> int | None:
        """``exp``."""
        return self.ucan.expiration

    def proofs(self) -> list[Delegation | CID]:
        """Each proof as a ``Delegation`` when its block is here, else its bare CID.

        Views of one archive are shared, so a proof reached twice is one object.

        Raises:
            InvalidFormat: a proof block that is not a UCAN.
        """
        if self._proof_cache is None:
            links = self.ucan.proofs
            if not links:
                return []  # a leaf keeps no list alive
            views = self._views
            if views is None and len(links) > 1:
                views = self._views = {}  # paths fork here: below, a proof may be reached twice
            resolved: list[Delegation | CID] = []
            for link in links:
                known = None if views is None else views.get(link)
                view = None if known is None else known()
                if view is None:
                    block = self.blocks.get(link)
                    if block is None:
                        resolved.append(link)
                        continue
                    view = Delegation._of_archive(Ucan.decode(block, link), self.blocks, views)
                    if views is not None:
                        views[link] = weakref.ref(view)
                resolved.append(view)
            self._proof_cache = resolved
        return self._proof_cache

    def chain(self) -> Iterator[Delegation]:
        """This delegation and every proof reachable from it, each once, depth-first."""
        seen: set[CID] = set()
        stack: list[Delegation] = [self]
        while stack:
            node = stack.pop()
            if node.cid in seen:
                continue
            seen.add(node.cid)
            yield node
            stack.extend(p for p in reversed(node.proofs()) if isinstance(p, Delegation))

    def iterate_blocks(self) -> Iterator[tuple[CID, bytes]]:
        """Proof blocks depth-first in ``prf`` order, then this UCAN (UCAN-11); each once."""
        seen: set[CID] = set()

        def walk(node: Delegation) -> Iterator[tuple[CID, bytes]]:
            seen.add(node.cid)
            for proof in node.proofs():
                if isinstance(proof, Delegation) and proof.cid not in seen:
                    yield from walk(proof)
            yield node.cid, node.ucan.block

        return walk(self)

    def archive(self) -> bytes:
        """The CARv1 archive ucanto's ``archive()`` produces."""
        variant = dag_cbor.encode({f"ucan@{self.ucan.version}": self.cid})
        root = cid_for(variant)
        return encode_car([root], [*self.iterate_blocks(), (root, variant)])

    def to_base64(self) -> str:
        """Standard padded base64 of ``archive()`` (the wire form)."""
        return base64.b64encode(self.archive()).decode()

    @classmethod
    def extract(cls, car: bytes) -> Delegation:
        """The delegation in a ucanto archive.

        Raises:
            InvalidFormat: not an archive of a delegation.
        """
        roots, blocks = decode_car_parts(car)
        root_block = blocks.get(roots[0])
        if root_block is None:
            raise InvalidFormat(_NOT_A_DELEGATION)
        link = _variant_link(root_block)
        block = blocks.get(link)
        if block is None:
            raise InvalidFormat(_NOT_A_DELEGATION)
        return cls._of_archive(Ucan.decode(block, link), blocks, None)

    @classmethod
    def from_base64(cls, token: str) -> Delegation:
        """``extract`` of a base64 token (standard or URL-safe, padded or not).

        Raises:
            InvalidFormat: oversized, not base64, or not a delegation archive.
        """
        return cls.extract(decode_base64(token))


def delegate(
    issuer: Signer,
    *,
    audience: str,
    capabilities: Sequence[Mapping[str, Any]],
    expiration: int | None,
    proofs: Sequence[Delegation] = (),
    not_before: int | None = None,
    nonce: str | None = None,
    facts: Sequence[Mapping[str, Any]] = (),
) -> Delegation:
    """Issue a delegation, embedding each proof's blocks (as ucanto's ``delegate``)."""
    ucan = issue(
        issuer,
        audience=audience,
        capabilities=capabilities,
        expiration=expiration,
        proofs=[p.cid for p in proofs],
        not_before=not_before,
        nonce=nonce,
        facts=facts,
        version=UCAN_VERSION,
    )
    blocks: dict[CID, bytes] = {}
    for proof in proofs:
        for cid, data in proof.iterate_blocks():
            blocks.setdefault(cid, data)
    return Delegation(ucan, blocks)


def invoke(
    issuer: Signer,
    *,
    audience: str,
    capability: Mapping[str, Any],
    expiration: int | None,
    proofs: Sequence[Delegation] = (),
    not_before: int | None = None,
    nonce: str | None = None,
    facts: Sequence[Mapping[str, Any]] = (),
) -> Delegation:
    """Issue an invocation: a delegation of one capability to the service."""
    return delegate(
        issuer,
        audience=audience,
        capabilities=[capability],
        expiration=expiration,
        proofs=proofs,
        not_before=not_before,
        nonce=nonce,
        facts=facts,
    )
