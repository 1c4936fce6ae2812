"""Validation of auth invocations, delegations and service invocations (UCAN-23 … 27).

Validators never raise on bad input: they return a ``ValidateResult`` whose ``error`` has
a stable code (``INVALID_FORMAT``, ``INVALID_SIGNATURE``, ``UNAUTHORIZED``, ``REPLAY``,
``EXPIRED``, ``CAVEAT_VIOLATION``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from multiformats.cid import CID

from oracle_ucan.capability import (
    CapabilityDef,
    ability_covers,
    resource_covers,
    resource_names_did,
)
from oracle_ucan.delegation import Delegation
from oracle_ucan.did import DidResolver
from oracle_ucan.errors import ErrorCode, UcanError
from oracle_ucan.principal import EDDSA_SIGNATURE_CODE, Ed25519Verifier
from oracle_ucan.stores import DEFAULT_TTL_SECONDS, InvocationStore

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "MAX_CHAIN_DEPTH",
    "ChainVerifier",
    "ValidateResult",
    "ValidationFailure",
    "validate_auth_invocation",
    "validate_delegation",
    "validate_invocation",
]

CLOCK_SKEW_SECONDS = 60
MAX_CHAIN_DEPTH = 8
"""Longest proof chain followed (delegations between the root and the invoker)."""
DEFAULT_AUTH_MAX_TTL = 900
_RESOLVED_KEY_TTL = 300.0


@dataclass(frozen=True)
class ValidationFailure:
    """Why a token was refused."""

    code: ErrorCode
    message: str


@dataclass(frozen=True)
class ValidateResult:
    """Outcome of a validation (UCAN-23).

    Attributes:
        ok: Whether the token is valid.
        invoker: The issuer of the token.
        capability: The capability that was validated (``{can, with, nb?}``).
        expiration: The earliest expiry in the chain (``None`` for never).
        proof_chain: Issuer DIDs from the root to the invoker.
        facts: ``fct`` of the token.
        error: Why it was refused, when not ``ok``.
        delegation: The decoded token, when it decoded.
    """

    ok: bool
    invoker: str | None = None
    capability: Mapping[str, Any] | None = None
    expiration: int | None = None
    proof_chain: tuple[str, ...] = ()
    facts: tuple[Mapping[str, Any], ...] = ()
    error: ValidationFailure | None = None
    delegation: Delegation | None = field(default=None, compare=False, repr=False)

    @classmethod
    def fail(
        cls, code: ErrorCode, message: str, delegation: Delegation | None = None
    ) -> ValidateResult:
        """A refusal."""
        return cls(ok=False, error=ValidationFailure(code, message), delegation=delegation)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data: dict[str, Any] = {"ok": self.ok}
        if self.ok:
            data.update(
                invoker=self.invoker,
                capability=dict(self.capability or {}),
                expiration=self.expiration,
                proof_chain=list(self.proof_chain),
                facts=[dict(f) for f in self.facts],
            )
        if self.error is not None:
            data["error"] = {"code": self.error.code, "message": self.error.message}
        return data


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ChainVerifier:
    """Verifies UCAN signatures, remembering blocks already verified.

    A block's CID covers its signature, so a CID verified once stays verified: for
    ``did:key`` issuers for ever, for resolved DIDs as long as key resolutions are cached.

    Args:
        resolver: Resolves non-``did:key`` issuers (``did:ixo``, ``did:web``).
        cache_size: Verified blocks remembered.
        clock: Monotonic clock for the resolved-key expiry.
    """

    def __init__(
        self,
        resolver: DidResolver | None = None,
        *,
        cache_size: int = 50_000,
        clock: Any = time.monotonic,
    ) -> None:
        self.resolver = resolver
        self.cache_size = cache_size
        self._clock = clock
        # The key that signed each verified block. Entries whose key came from a DID
        # resolution expire (``_expiry``); those of ``did:key`` issuers, signed by the
        # issuer itself, do not (and cost no expiry record).
        self._verified: OrderedDict[CID, str] = OrderedDict()
        self._expiry: dict[CID, float] = {}

    async def keys_of(self, did: str) -> list[str]:
        """The ``did:key``s that may sign as ``did``."""
        if did.startswith("did:key:"):
            return [did]
        if self.resolver is None:
            raise _Refusal("INVALID_SIGNATURE", f"cannot resolve the keys of {did}")
        try:
            keys = await self.resolver.resolve(did)
        except UcanError as exc:
            raise _Refusal("INVALID_SIGNATURE", f"cannot resolve {did}: {exc.message}") from exc
        if not keys:
            raise _Refusal("INVALID_SIGNATURE", f"{did} has no verification keys")
        return keys

    async def verify(self, delegation: Delegation) -> str:
        """The ``did:key`` whose signature ``delegation`` carries.

        Raises:
            _Refusal: the signature does not verify with any key of the issuer.
        """
        cid = delegation.cid
        ucan = delegation.ucan
        issuer = ucan.issuer
        cached = self._verified.get(cid)
        if cached is not None and (cached == issuer or self._expiry[cid] > self._clock()):
            self._verified.move_to_end(cid)
            return cached
        unsupported = None
        keys = [issuer] if issuer.startswith("did:key:") else await self.keys_of(issuer)
        for key in keys:
            try:
                verifier = _verifier_for(key)
            except UcanError as exc:
                unsupported = exc.message
                continue
            # Ucan.verify_with, inlined: this runs for every UCAN of every cold token.
            if ucan.signature_code == EDDSA_SIGNATURE_CODE and verifier.verify(
                ucan.signature, ucan.signing_input()
            ):
                self._verified[cid] = key
                if key != issuer:
                    self._expiry[cid] = self._clock() + _RESOLVED_KEY_TTL
                if len(self._verified) > self.cache_size:
                    evicted, _ = self._verified.popitem(last=False)
                    self._expiry.pop(evicted, None)
                return key
        reason = unsupported if unsupported else "signature does not verify"
        raise _Refusal("INVALID_SIGNATURE", f"UCAN {cid} from {issuer}: {reason}")


_DEFAULT_VERIFIER = ChainVerifier()


@lru_cache(maxsize=4096)
def _verifier_for(did_key: str) -> Ed25519Verifier:
    return Ed25519Verifier.from_did(did_key)


_TOKENS: OrderedDict[str, Delegation] = OrderedDict()
_TOKENS_MAX = 4096
_TOKEN_CACHE_MAX_CHARS = 16 * 1024


def _decode(token: str | bytes | Delegation) -> Delegation:
    if isinstance(token, Delegation):
        return token
    if isinstance(token, bytes):
        return Delegation.extract(token)
    # Clients send the same delegation with every request: a token decodes to the same
    # archive every time (its bytes are its content), so decoded archives are reused.
    cached = _TOKENS.get(token)
    if cached is not None:
        _TOKENS.move_to_end(token)
        return cached
    return Delegation.from_base64(token)


def _remember(token: str | bytes | Delegation, delegation: Delegation) -> None:
    """Keep a decoded token that validated: only valid, modest tokens take memory."""
    if type(token) is not str or len(token) > _TOKEN_CACHE_MAX_CHARS or token in _TOKENS:
        return
    _TOKENS[token] = delegation
    if len(_TOKENS) > _TOKENS_MAX:
        _TOKENS.popitem(last=False)


def _check_time(delegation: Delegation, now: int) -> None:
    ucan = delegation.ucan
    if (
        ucan.expiration is not None
        and ucan.not_before is not None
        and ucan.expiration < ucan.not_before
    ):
        raise _Refusal("UNAUTHORIZED", f"UCAN {delegation.cid} expires before it starts")
    if ucan.expiration is not None and ucan.expiration <= now:
        raise _Refusal("EXPIRED", f"UCAN {delegation.cid} expired at {ucan.expiration}")
    if ucan.not_before is not None and ucan.not_before > now + CLOCK_SKEW_SECONDS:
        raise _Refusal(
            "UNAUTHORIZED", f"UCAN {delegation.cid} is not valid before {ucan.not_before}"
        )


def _earliest(chain: list[Delegation]) -> int | None:
    earliest = None
    for delegation in chain:
        expiration = delegation.ucan.expiration
        if expiration is not None and (earliest is None or expiration < earliest):
            earliest = expiration
    return earliest


async def _verify_dag(
    root: Delegation, now: int, verifier: ChainVerifier
) -> tuple[dict[CID, str], list[Delegation], bool]:
    """Time bounds and signatures of every UCAN reachable from ``root``.

    Depth-first in ``prf`` order, each UCAN once; returns the key that signed each UCAN,
    the UCANs in the order visited, and whether every proof is addressed to its child's
    issuer (when not, ``_aligned`` decides). A missing proof is refused when the walk
    reaches it, after the subtrees of the proofs listed before it.
    """
    keys: dict[CID, str] = {}
    seen: list[Delegation] = []
    addressed = True
    # An explicit stack instead of a recursive coroutine per UCAN: popped in the same
    # order the recursion would visit, for a fraction of the cost.
    stack: list[tuple[Delegation | CID, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Delegation):
            raise _Refusal("INVALID_FORMAT", f"proof {node} is not in the archive")
        if depth > MAX_CHAIN_DEPTH:
            raise _Refusal("UNAUTHORIZED", f"proof chain is longer than {MAX_CHAIN_DEPTH}")
        cid = node.cid
        if cid in keys:
            continue
        _check_time(node, now)
        keys[cid] = await verifier.verify(node)
        seen.append(node)
        depth += 1
        issuer = node.ucan.issuer
        for proof in reversed(node.proofs()):
            if addressed and isinstance(proof, Delegation) and proof.ucan.audience != issuer:
                addressed = False
            stack.append((proof, depth))
    return keys, seen, addressed


async def _check_alignment(
    chain: list[Delegation], keys: dict[CID, str], verifier: ChainVerifier
) -> None:
    """Each proof is addressed to its child's issuer or lists the key that signed it."""
    for node in chain:
        issuer = node.ucan.issuer
        for proof in node.proofs():
            assert isinstance(proof, Delegation)
            if proof.ucan.audience == issuer:
                continue
            if not await _aligned(proof, node, keys[node.cid], verifier):
                raise _Refusal(
                    "UNAUTHORIZED",
                    f"proof {proof.cid} is addressed to {proof.audience}, not {node.issuer}",
                )


async def _aligned(
    proof: Delegation, child: Delegation, child_key: str, verifier: ChainVerifier
) -> bool:
    """``proof.aud`` is the child's issuer, or lists the key that signed the child."""
    if proof.audience == child.issuer:
        return True
    try:
        return child_key in await verifier.keys_of(proof.audience)
    except _Refusal:
        return False


def _first_capability(delegation: Delegation) -> Mapping[str, Any] | None:
    caps = delegation.capabilities
    return dict(caps[0]) if caps else None


async def validate_auth_invocation(
    token: str | bytes | Delegation,
    *,
    audience: str,
    max_ttl: int = DEFAULT_AUTH_MAX_TTL,
    now: int | None = None,
    verifier: ChainVerifier | None = None,
) -> ValidateResult:
    """Validate the bearer invocation a client authenticates with (UCAN-24).

    Checks the audience, a required and unexpired ``exp``, ``nbf``, the lifetime against
    ``max_ttl`` (``UCAN_AUTH_MAX_TTL_SECONDS``) and the issuer's signature. Capabilities
    and proofs are not inspected, and there is no replay store: the token is reusable
    until it expires, like a JWT.
    """
    now = int(time.time()) if now is None else now
    verifier = verifier or _DEFAULT_VERIFIER
    try:
        delegation = _decode(token)
    except UcanError as exc:
        return ValidateResult.fail("INVALID_FORMAT", exc.message)
    ucan = delegation.ucan
    try:
        if ucan.audience != audience:
            raise _Refusal(
                "UNAUTHORIZED", f"invocation is addressed to {ucan.audience}, not {audience}"
            )
        if ucan.expiration is None:
            raise _Refusal("UNAUTHORIZED", "an auth invocation must expire")
        _check_time(delegation, now)
        start = max(now, ucan.not_before or 0)
        if ucan.expiration - start > max_ttl + CLOCK_SKEW_SECONDS:
            raise _Refusal("UNAUTHORIZED", "lifetime exceeds UCAN_AUTH_MAX_TTL_SECONDS")
        await verifier.verify(delegation)
    except _Refusal as refusal:
        return ValidateResult.fail(refusal.code, refusal.message, delegation)
    _remember(token, delegation)
    return ValidateResult(
        ok=True,
        invoker=ucan.issuer,
        capability=_first_capability(delegation),
        expiration=ucan.expiration,
        proof_chain=(ucan.issuer,),
        facts=ucan.facts,
        delegation=delegation,
    )


async def validate_delegation(
    token: str | bytes | Delegation,
    *,
    audience: str,
    now: int | None = None,
    verifier: ChainVerifier | None = None,
) -> ValidateResult:
    """Validate a user's delegation to the oracle (UCAN-25).

    Checks the audience, the time bounds and signature of every UCAN in the archive, and
    that each proof is addressed to its child's issuer (or lists the key that signed the
    child). Attenuation is not checked, as in the TypeScript runtime.
    """
    now = int(time.time()) if now is None else now
    verifier = verifier or _DEFAULT_VERIFIER
    try:
        delegation = _decode(token)
    except UcanError as exc:
        return ValidateResult.fail("INVALID_FORMAT", exc.message)
    ucan = delegation.ucan
    try:
        if ucan.audience != audience:
            raise _Refusal(
                "UNAUTHORIZED", f"delegation is addressed to {ucan.audience}, not {audience}"
            )
        keys, chain, addressed = await _verify_dag(delegation, now, verifier)
        if not addressed:
            await _check_alignment(chain, keys, verifier)
    except UcanError as exc:
        return ValidateResult.fail("INVALID_FORMAT", exc.message, delegation)
    except _Refusal as refusal:
        return ValidateResult.fail(refusal.code, refusal.message, delegation)
    _remember(token, delegation)
    # Positional, in field order: keyword arguments make this frozen dataclass's
    # construction half again as slow, and it runs on every validation.
    return ValidateResult(
        True,  # ok
        ucan.issuer,  # invoker
        _first_capability(delegation),  # capability
        _earliest(chain),  # expiration
        _first_proof_issuers(delegation),  # proof_chain
        ucan.facts,  # facts
        None,  # error
        delegation,
    )


def _first_proof_issuers(delegation: Delegation) -> tuple[str, ...]:
    """Issuers along the first-proof path, from its root down to ``delegation``."""
    issuers = [delegation.ucan.issuer]
    node = delegation
    while True:
        proofs = node.proofs()
        if not proofs:
            break
        first = proofs[0]
        if not isinstance(first, Delegation):
            break
        node = first
        issuers.append(node.ucan.issuer)
    issuers.reverse()
    return tuple(issuers)


MAX_DERIVATION_STEPS = 1000
"""Most (proof, capability) pairs examined for one claim; bounds crafted archives."""


@dataclass
class _Derivation:
    chain: list[Delegation]
    caveat_failures: list[str] = field(default_factory=list)
    other_failures: list[str] = field(default_factory=list)
    steps: int = 0


def _can_issue(capability: Mapping[str, Any], issuer: str, root_issuers: Collection[str]) -> bool:
    if "*" in root_issuers or issuer in root_issuers:
        return True
    return resource_names_did(str(capability["with"]), issuer)


async def _derive(
    claimed: Mapping[str, Any],
    node: Delegation,
    keys: Mapping[CID, str],
    definition: CapabilityDef,
    root_issuers: Collection[str],
    verifier: ChainVerifier,
    depth: int,
    failures: _Derivation,
) -> list[Delegation] | None:
    """The chain from a root down to ``node`` that grants ``claimed``, or ``None``."""
    if _can_issue(claimed, node.issuer, root_issuers):
        return [node]
    if depth >= MAX_CHAIN_DEPTH:
        failures.other_failures.append(f"proof chain is longer than {MAX_CHAIN_DEPTH}")
        return None
    for proof in node.proofs():
        assert isinstance(proof, Delegation)  # _verify_dag refused missing proofs
        if not await _aligned(proof, node, keys[node.cid], verifier):
            failures.other_failures.append(f"proof {proof.cid} is not addressed to {node.issuer}")
            continue
        for granted in proof.capabilities:
            failures.steps += 1
            if failures.steps > MAX_DERIVATION_STEPS:
                raise _Refusal("UNAUTHORIZED", "the proof search is too large")
            if not ability_covers(str(granted["can"]), str(claimed["can"])):
                continue
            if not resource_covers(str(granted["with"]), str(claimed["with"])):
                continue
            violation = definition.caveat_violation(claimed, granted)
            if violation is not None:
                failures.caveat_failures.append(violation)
                continue
            # Further up, the grant itself must be derivable, with the claimed ability.
            narrowed = {
                "can": claimed["can"],
                "with": granted["with"],
                "nb": granted.get("nb") or {},
            }
            chain = await _derive(
                narrowed, proof, keys, definition, root_issuers, verifier, depth + 1, failures
            )
            if chain is not None:
                return [*chain, node]
    return None


async def validate_invocation(
    token: str | bytes | Delegation,
    capability: CapabilityDef,
    resource: str,
    *,
    audience: str,
    root_issuers: Collection[str],
    store: InvocationStore,
    now: int | None = None,
    verifier: ChainVerifier | None = None,
) -> ValidateResult:
    """Validate a single-use invocation of ``capability`` on ``resource`` (UCAN-26).

    ucanto ``claim()`` parity: audience; replay (``store``); time bounds and signatures on
    every UCAN; the claim must derive through an unbroken chain of proofs, each covering
    the ability, the resource and the caveats, from a root issuer (``"*"`` in
    ``root_issuers``, the issuer listed there, or an issuer DID contained in the
    resource). On success the invocation's ``Ucan.replay_key()`` (the CID of its signed
    bytes, the same for every encoding of it) is recorded in ``store``.
    """
    now = int(time.time()) if now is None else now
    verifier = verifier or _DEFAULT_VERIFIER
    try:
        invocation = _decode(token)
    except UcanError as exc:
        return ValidateResult.fail("INVALID_FORMAT", exc.message)
    # Not the block's CID: re-encoding the block (an empty ``nnc``) or linking it by
    # another CID would give the same signed invocation a fresh one.
    replay_key = invocation.ucan.replay_key()
    try:
        if invocation.audience != audience:
            raise _Refusal(
                "UNAUTHORIZED", f"invocation is addressed to {invocation.audience}, not {audience}"
            )
        if await store.has(replay_key):
            raise _Refusal("REPLAY", "Invocation has already been used")
        keys, _, _ = await _verify_dag(invocation, now, verifier)
        claims = [c for c in invocation.capabilities if c.get("can") == capability.can]
        if not claims:
            raise _Refusal("UNAUTHORIZED", f"the invocation does not claim {capability.can}")
        claimed = claims[0]
        malformed = capability.malformed(claimed)
        if malformed is not None:
            raise _Refusal("INVALID_FORMAT", malformed)
        if not resource_covers(str(claimed["with"]), resource):
            raise _Refusal(
                "UNAUTHORIZED", f"the invocation is for {claimed['with']}, not {resource}"
            )
        failures = _Derivation(chain=[])
        derived = await _derive(
            claimed, invocation, keys, capability, root_issuers, verifier, 0, failures
        )
        if derived is None:
            if failures.caveat_failures:
                raise _Refusal("CAVEAT_VIOLATION", "; ".join(failures.caveat_failures))
            detail = "; ".join(failures.other_failures) or "no proof grants it"
            raise _Refusal(
                "UNAUTHORIZED", f"{capability.can} on {claimed['with']} is not authorized: {detail}"
            )
    except UcanError as exc:
        return ValidateResult.fail("INVALID_FORMAT", exc.message, invocation)
    except _Refusal as refusal:
        return ValidateResult.fail(refusal.code, refusal.message, invocation)
    expiration = _earliest(derived)
    ttl = DEFAULT_TTL_SECONDS if expiration is None else min(DEFAULT_TTL_SECONDS, expiration - now)
    # Claimed last and atomically: two concurrent uses both get this far, one wins.
    if not await store.claim(replay_key, max(1, ttl)):
        return ValidateResult.fail("REPLAY", "Invocation has already been used", invocation)
    return ValidateResult(
        ok=True,
        invoker=invocation.issuer,
        capability=dict(claimed),
        expiration=expiration,
        proof_chain=tuple(d.issuer for d in derived),
        facts=invocation.ucan.facts,
        delegation=invocation,
    )
