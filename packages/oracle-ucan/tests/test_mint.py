"""Minting downstream invocations from a user's delegation (UCAN-29 … 33).

The oracle signs as its ``did:ixo`` with its Ed25519 key; services verify the minted
tokens with ``validate_invocation``, resolving the oracle's DID through the local table.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from oracle_ucan import (
    CapabilityDef,
    ChainVerifier,
    CompositeResolver,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    InvocationMinter,
    LocalResolver,
    MintError,
    TokenCache,
    dag_cbor,
    delegate,
    mint_invocation,
    validate_invocation,
)

NOW = 1_700_000_000
ORACLE = "did:ixo:ixo1oracle00000000000000000000000000000"
SERVICE_URL = "https://memory.example.org/mcp"
MEMORY = {"with": "ixo:memory", "can": "memory/*"}
SANDBOX = {"with": "ixo:sandbox", "can": "*"}
NONCE = re.compile(r"^[0-9a-f]{16}$")


class Clock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Parties:
    def __init__(self) -> None:
        self.user = Ed25519Signer.generate()
        self.oracle_key = Ed25519Signer.generate()
        self.service = Ed25519Signer.generate()

    @property
    def service_did(self) -> str:
        return self.service.did()

    def delegation(self, *, expiration: int | None = NOW + 7200, **extra: Any) -> Delegation:
        return delegate(
            self.user,
            audience=ORACLE,
            capabilities=[MEMORY, SANDBOX],
            expiration=expiration,
            **extra,
        )

    def service_verifier(self) -> ChainVerifier:
        local = LocalResolver()
        local.register(ORACLE, self.oracle_key.did().removeprefix("did:key:"))
        return ChainVerifier(CompositeResolver([local]))

    def minter(self, clock: Clock | None = None, **options: Any) -> InvocationMinter:
        return InvocationMinter(
            self.oracle_key, ORACLE, cache=TokenCache(clock=clock or Clock()), **options
        )


@pytest.fixture
def parties() -> Parties:
    return Parties()


def _mint(parties: Parties, delegation: Delegation, **options: Any) -> Delegation:
    options.setdefault("with_", "ixo:sandbox")
    options.setdefault("now", NOW)
    return mint_invocation(
        parties.oracle_key,
        delegation,
        oracle_did=ORACLE,
        audience=parties.service_did,
        **options,
    )


# --- mint_invocation ---------------------------------------------------------------------


async def test_minted_invocation_fields(parties: Parties) -> None:
    delegation = parties.delegation()

    invocation = _mint(parties, delegation, with_="ixo:sandbox", can="*")

    ucan = invocation.ucan
    assert ucan.issuer == ORACLE
    assert ucan.audience == parties.service_did
    assert ucan.capabilities == ({"with": "ixo:sandbox", "can": "*"},)
    assert ucan.proofs == (delegation.cid,)
    assert ucan.expiration == NOW + 3600
    assert ucan.not_before is None
    assert ucan.facts == ()
    assert ucan.nonce is None
    assert set(dag_cbor.decode(ucan.block)) == {"v", "iss", "aud", "s", "att", "prf", "exp"}
    # Signed by the oracle's key while naming its did:ixo.
    assert ucan.verify_with(parties.oracle_key.verifier) is True
    assert ucan.verify_with(parties.user.verifier) is False


async def test_minted_invocation_embeds_the_delegation_blocks(parties: Parties) -> None:
    root = Ed25519Signer.generate()
    upstream = delegate(root, audience=parties.user.did(), capabilities=[MEMORY], expiration=None)
    delegation = parties.delegation(proofs=[upstream])

    wire = _mint(parties, delegation, with_="ixo:memory", can="memory/read").to_base64()

    received = Delegation.from_base64(wire)
    [proof] = received.proofs()
    assert isinstance(proof, Delegation)
    assert proof.cid == delegation.cid
    assert proof.ucan.block == delegation.ucan.block
    [grand_proof] = proof.proofs()
    assert isinstance(grand_proof, Delegation)
    assert grand_proof.cid == upstream.cid


async def test_expiry_is_capped_by_the_delegation(parties: Parties) -> None:
    invocation = _mint(parties, parties.delegation(expiration=NOW + 600))
    assert invocation.expiration == NOW + 600


async def test_expiry_is_capped_by_the_earliest_expiry_in_the_chain(parties: Parties) -> None:
    root = Ed25519Signer.generate()
    upstream = delegate(
        root, audience=parties.user.did(), capabilities=[SANDBOX], expiration=NOW + 300
    )
    delegation = parties.delegation(expiration=None, proofs=[upstream])
    assert _mint(parties, delegation).expiration == NOW + 300


async def test_a_delegation_that_never_expires_gives_an_hour(parties: Parties) -> None:
    assert _mint(parties, parties.delegation(expiration=None)).expiration == NOW + 3600
    shorter = _mint(parties, parties.delegation(expiration=None), ttl_seconds=90)
    assert shorter.expiration == NOW + 90


async def test_a_did_key_oracle_signs_as_itself(parties: Parties) -> None:
    delegation = delegate(
        parties.user,
        audience=parties.oracle_key.did(),
        capabilities=[SANDBOX],
        expiration=None,
    )
    invocation = mint_invocation(
        parties.oracle_key,
        delegation,
        oracle_did=parties.oracle_key.did(),
        audience=parties.service_did,
        with_="ixo:sandbox",
        now=NOW,
    )
    assert invocation.issuer == parties.oracle_key.did()
    assert invocation.ucan.verify_with(parties.oracle_key.verifier) is True


async def test_without_a_nonce_two_mints_in_one_second_share_a_cid(parties: Parties) -> None:
    delegation = parties.delegation()
    first, second = _mint(parties, delegation), _mint(parties, delegation)
    assert first.cid == second.cid
    with_nonces = [_mint(parties, delegation, nonce=n) for n in ("00aa11bb22cc33dd", "ffee")]
    assert with_nonces[0].ucan.nonce == "00aa11bb22cc33dd"
    assert with_nonces[0].cid != with_nonces[1].cid != first.cid


@pytest.mark.parametrize(
    ("with_", "can"),
    [
        ("ixo:skills", "*"),  # no grant for the resource
        ("ixo:memory", "*"),  # "*" is not within "memory/*"
        ("ixo:memory", "store/add"),
        ("ixo:memory/sub", "memory/read"),  # no wildcard on "ixo:memory"
    ],
)
async def test_uncovered_capability_is_not_found(parties: Parties, with_: str, can: str) -> None:
    with pytest.raises(MintError) as caught:
        _mint(parties, parties.delegation(), with_=with_, can=can)
    assert caught.value.message == "Delegated capability not found"
    assert caught.value.code == "UNAUTHORIZED"


@pytest.mark.parametrize(("with_", "can"), [("ixo:memory", "memory/read"), ("ixo:sandbox", "x")])
async def test_covered_capability_is_minted(parties: Parties, with_: str, can: str) -> None:
    invocation = _mint(parties, parties.delegation(), with_=with_, can=can)
    assert invocation.capabilities == ({"with": with_, "can": can},)


@pytest.mark.parametrize("expiration", [NOW, NOW - 1])
async def test_expired_delegation_is_a_mint_error(parties: Parties, expiration: int) -> None:
    with pytest.raises(MintError) as caught:
        _mint(parties, parties.delegation(expiration=expiration))
    assert caught.value.message == "The delegation has expired; ask the user to re-authorise"


# --- end to end: the service validates what the oracle mints -----------------------------


async def test_minted_invocation_validates_on_the_service_side(parties: Parties) -> None:
    delegation = parties.delegation()
    token = _mint(parties, delegation, with_="ixo:memory", can="memory/read").to_base64()
    store = InMemoryInvocationStore(clock=Clock())

    result = await validate_invocation(
        token,
        CapabilityDef("memory/read", protocol="ixo:"),
        "ixo:memory",
        audience=parties.service_did,
        root_issuers=[parties.user.did()],
        store=store,
        now=NOW,
        verifier=parties.service_verifier(),
    )

    assert result.ok is True
    assert result.invoker == ORACLE
    assert result.proof_chain == (parties.user.did(), ORACLE)
    assert result.capability == {"with": "ixo:memory", "can": "memory/read"}
    assert result.expiration == NOW + 3600
    assert len(store) == 1


async def test_fresh_mints_pass_a_single_use_service_twice(parties: Parties) -> None:
    minter = parties.minter()
    delegation = parties.delegation()
    store = InMemoryInvocationStore(clock=Clock())
    everything = CapabilityDef("*", protocol="ixo:")
    verifier = parties.service_verifier()

    async def call(token: str) -> str | None:
        result = await validate_invocation(
            token,
            everything,
            "ixo:sandbox",
            audience=parties.service_did,
            root_issuers=[parties.user.did()],
            store=store,
            now=NOW,
            verifier=verifier,
        )
        return None if result.error is None else result.error.code

    fresh = [
        await minter.mint(
            parties.user.did(),
            delegation,
            audience=parties.service_did,
            with_="ixo:sandbox",
            skip_cache=True,
            now=NOW,
        )
        for _ in range(2)
    ]
    assert fresh[0] is not None
    assert fresh[1] is not None
    assert [await call(fresh[0]), await call(fresh[1])] == [None, None]
    assert await call(fresh[0]) == "REPLAY"


async def test_service_refuses_a_mint_when_the_user_is_no_root(parties: Parties) -> None:
    token = _mint(parties, parties.delegation()).to_base64()
    result = await validate_invocation(
        token,
        CapabilityDef("*", protocol="ixo:"),
        "ixo:sandbox",
        audience=parties.service_did,
        root_issuers=[Ed25519Signer.generate().did()],
        store=InMemoryInvocationStore(clock=Clock()),
        now=NOW,
        verifier=parties.service_verifier(),
    )
    assert result.ok is False
    assert result.error is not None
    assert result.error.code == "UNAUTHORIZED"


# --- TokenCache --------------------------------------------------------------------------

KEY = ("did:key:user", "did:key:service", "ixo:sandbox", "*")


def test_cache_miss_is_none() -> None:
    assert TokenCache(clock=Clock()).get(KEY) is None


def test_cache_reuses_a_token_until_sixty_seconds_before_expiry() -> None:
    clock = Clock()
    cache = TokenCache(clock=clock)
    cache.put(KEY, "token-1", NOW + 1000)
    assert cache.get(KEY) == "token-1"
    clock.now = NOW + 939
    assert cache.get(KEY) == "token-1"
    clock.now = NOW + 940
    assert cache.get(KEY) is None
    clock.now = NOW  # dropped, not merely hidden
    assert cache.get(KEY) is None


def test_cache_keys_are_distinct() -> None:
    cache = TokenCache(clock=Clock())
    cache.put(KEY, "token-1", NOW + 1000)
    for other in [
        ("did:key:other", *KEY[1:]),
        (KEY[0], "did:key:other", *KEY[2:]),
        (*KEY[:2], "ixo:memory", KEY[3]),
        (*KEY[:3], "memory/*"),
    ]:
        assert cache.get((other[0], other[1], other[2], other[3])) is None
    assert cache.get(KEY) == "token-1"


def test_cache_put_replaces() -> None:
    cache = TokenCache(clock=Clock())
    cache.put(KEY, "token-1", NOW + 1000)
    cache.put(KEY, "token-2", NOW + 2000)
    assert cache.get(KEY) == "token-2"


def test_cache_drops_the_least_recently_used_entry() -> None:
    cache = TokenCache(max_entries=2, clock=Clock())
    a, b, c = (("user", "aud", "with", can) for can in ("a", "b", "c"))
    cache.put(a, "token-a", NOW + 1000)
    cache.put(b, "token-b", NOW + 1000)
    assert cache.get(a) == "token-a"  # a is now the most recently used
    cache.put(c, "token-c", NOW + 1000)
    assert cache.get(b) is None
    assert cache.get(a) == "token-a"
    assert cache.get(c) == "token-c"


# --- InvocationMinter.mint ---------------------------------------------------------------


async def test_has_signing_key(parties: Parties) -> None:
    assert parties.minter().has_signing_key() is True
    assert InvocationMinter(None, ORACLE).has_signing_key() is False


async def test_mint_returns_a_token(parties: Parties) -> None:
    delegation = parties.delegation()
    token = await parties.minter().mint(
        parties.user.did(), delegation, audience=parties.service_did, with_="ixo:sandbox", now=NOW
    )
    assert token is not None
    invocation = Delegation.from_base64(token)
    assert invocation.issuer == ORACLE
    assert invocation.audience == parties.service_did
    assert invocation.capabilities == ({"with": "ixo:sandbox", "can": "*"},)
    assert invocation.ucan.proofs == (delegation.cid,)
    assert invocation.ucan.nonce is None
    assert invocation.expiration == NOW + 3600


async def test_mint_accepts_the_delegation_as_base64(parties: Parties) -> None:
    delegation = parties.delegation()
    token = await parties.minter().mint(
        parties.user.did(),
        delegation.to_base64(),
        audience=parties.service_did,
        with_="ixo:memory",
        can="memory/read",
        now=NOW,
    )
    assert token is not None
    assert Delegation.from_base64(token).ucan.proofs == (delegation.cid,)


async def test_mint_without_a_key_is_none(parties: Parties) -> None:
    minter = InvocationMinter(None, ORACLE)
    token = await minter.mint(
        parties.user.did(), parties.delegation(), audience=parties.service_did, with_="ixo:sandbox"
    )
    assert token is None


@pytest.mark.parametrize(
    ("delegation", "with_", "can"),
    [
        (None, "ixo:sandbox", "*"),
        ("usable", "ixo:skills", "*"),
        ("usable", "ixo:memory", "*"),
        ("expired", "ixo:sandbox", "*"),
        ("not a delegation", "ixo:sandbox", "*"),
    ],
    ids=["no-delegation", "uncovered-resource", "uncovered-ability", "expired", "garbage"],
)
async def test_mint_degrades_to_none(
    parties: Parties, delegation: str | None, with_: str, can: str
) -> None:
    usable = {"usable": parties.delegation(), "expired": parties.delegation(expiration=NOW - 1)}
    minter = parties.minter()
    token = await minter.mint(
        parties.user.did(),
        usable.get(delegation or "", delegation),
        audience=parties.service_did,
        with_=with_,
        can=can,
        now=NOW,
    )
    assert token is None
    assert minter.cache.get((parties.user.did(), parties.service_did, with_, can)) is None


async def test_mint_caches_per_user_audience_resource_and_ability(parties: Parties) -> None:
    clock = Clock()
    minter = parties.minter(clock)
    delegation = parties.delegation(expiration=None)

    async def mint(
        user: str, audience: str, with_: str = "ixo:sandbox", can: str = "*"
    ) -> Delegation:
        token = await minter.mint(
            user, delegation, audience=audience, with_=with_, can=can, now=int(clock.now)
        )
        assert token is not None
        return Delegation.from_base64(token)

    user, service = parties.user.did(), parties.service_did
    first = await mint(user, service)
    clock.now = NOW + 10
    again = await mint(user, service)
    assert again.cid == first.cid  # from the cache: minted ten seconds earlier
    assert again.expiration == NOW + 3600
    # Any other key mints afresh, at the new time.
    for other in [
        await mint("did:key:z6MkAnotherUser", service),
        await mint(user, "did:key:z6MkAnotherService"),
        await mint(user, service, with_="ixo:memory", can="memory/read"),
        await mint(user, service, can="sandbox/exec"),
    ]:
        assert other.expiration == NOW + 10 + 3600
        assert other.cid != first.cid
    assert minter.cache.get((user, service, "ixo:sandbox", "*")) == first.to_base64()


async def test_mint_renews_a_cached_token_near_its_expiry(parties: Parties) -> None:
    clock = Clock()
    minter = parties.minter(clock)
    delegation = parties.delegation(expiration=None)
    args: dict[str, Any] = {"audience": parties.service_did, "with_": "ixo:sandbox"}

    first = await minter.mint(parties.user.did(), delegation, now=NOW, **args)
    clock.now = NOW + 3600 - 61
    kept = await minter.mint(parties.user.did(), delegation, now=int(clock.now), **args)
    clock.now = NOW + 3600 - 60
    renewed = await minter.mint(parties.user.did(), delegation, now=int(clock.now), **args)

    assert kept == first
    assert renewed is not None
    assert renewed != first
    assert Delegation.from_base64(renewed).expiration == NOW + 2 * 3600 - 60


async def test_skip_cache_neither_reads_nor_fills_the_cache(parties: Parties) -> None:
    minter = parties.minter()
    delegation = parties.delegation()
    key = (parties.user.did(), parties.service_did, "ixo:sandbox", "*")
    args: dict[str, Any] = {"audience": parties.service_did, "with_": "ixo:sandbox", "now": NOW}

    fresh = await minter.mint(parties.user.did(), delegation, skip_cache=True, **args)
    assert fresh is not None
    assert minter.cache.get(key) is None  # not filled

    cached = await minter.mint(parties.user.did(), delegation, **args)
    assert cached is not None
    assert cached != fresh
    bypass = await minter.mint(parties.user.did(), delegation, skip_cache=True, **args)
    assert bypass is not None
    assert bypass not in (cached, fresh)  # not read
    assert minter.cache.get(key) == cached  # not overwritten


async def test_skip_cache_mints_carry_a_random_16_hex_nonce(parties: Parties) -> None:
    minter = parties.minter()
    delegation = parties.delegation()
    tokens = [
        await minter.mint(
            parties.user.did(),
            delegation,
            audience=parties.service_did,
            with_="ixo:sandbox",
            skip_cache=True,
            now=NOW,
        )
        for _ in range(3)
    ]
    decoded = [Delegation.from_base64(t) for t in tokens if t is not None]
    assert len(decoded) == 3
    nonces = [d.ucan.nonce for d in decoded]
    assert all(n is not None and NONCE.fullmatch(n) for n in nonces)
    assert len(set(nonces)) == 3
    assert len({d.cid for d in decoded}) == 3  # same second, different CIDs


# --- create_invocation_from_delegation ---------------------------------------------------


class ServiceDirectory:
    """``resolve_service_did``: the DID a service URL publishes, recording each lookup."""

    def __init__(self, dids: dict[str, str]) -> None:
        self.dids = dids
        self.asked: list[str] = []

    async def __call__(self, url: str) -> str | None:
        self.asked.append(url)
        return self.dids.get(url)


async def test_create_without_a_key(parties: Parties) -> None:
    minter = InvocationMinter(None, ORACLE, resolve_service_did=ServiceDirectory({}))
    answer = await minter.create_invocation_from_delegation(
        parties.delegation().to_base64(), SERVICE_URL, SANDBOX
    )
    assert answer == {"error": "Oracle signing key not provisioned"}


async def test_create_with_an_unresolvable_service(parties: Parties) -> None:
    directory = ServiceDirectory({})
    minter = parties.minter(resolve_service_did=directory)
    answer = await minter.create_invocation_from_delegation(
        parties.delegation().to_base64(), SERVICE_URL, SANDBOX, now=NOW
    )
    assert answer == {"error": "Could not resolve service DID"}
    assert directory.asked == [SERVICE_URL]


async def test_create_without_a_service_resolver(parties: Parties) -> None:
    answer = await parties.minter().create_invocation_from_delegation(
        parties.delegation().to_base64(), SERVICE_URL, SANDBOX, now=NOW
    )
    assert answer == {"error": "Could not resolve service DID"}


async def test_create_with_a_delegation_to_someone_else(parties: Parties) -> None:
    directory = ServiceDirectory({SERVICE_URL: parties.service_did})
    other = delegate(
        parties.user, audience="did:ixo:ixo1other", capabilities=[SANDBOX], expiration=None
    )
    answer = await parties.minter(resolve_service_did=directory).create_invocation_from_delegation(
        other.to_base64(), SERVICE_URL, SANDBOX, now=NOW
    )
    assert answer == {
        "error": f"Delegation audience did:ixo:ixo1other does not match the oracle DID {ORACLE}"
    }
    assert directory.asked == []


async def test_create_with_garbage(parties: Parties) -> None:
    minter = parties.minter(resolve_service_did=ServiceDirectory({}))
    answer = await minter.create_invocation_from_delegation("%%%", SERVICE_URL, SANDBOX)
    assert list(answer) == ["error"]
    assert answer["error"].startswith("Invalid delegation: ")


@pytest.mark.parametrize(
    ("capability", "expiration", "error"),
    [
        ({"with": "ixo:skills", "can": "*"}, NOW + 60, "Delegated capability not found"),
        (
            SANDBOX,
            NOW - 1,
            "The delegation has expired; ask the user to re-authorise",
        ),
    ],
    ids=["uncovered", "expired"],
)
async def test_create_reports_mint_errors_verbatim(
    parties: Parties, capability: dict[str, str], expiration: int, error: str
) -> None:
    minter = parties.minter(resolve_service_did=ServiceDirectory({SERVICE_URL: "did:web:x"}))
    answer = await minter.create_invocation_from_delegation(
        parties.delegation(expiration=expiration).to_base64(), SERVICE_URL, capability, now=NOW
    )
    assert answer == {"error": error}


async def test_create_mints_for_the_resolved_service(parties: Parties) -> None:
    directory = ServiceDirectory({SERVICE_URL: parties.service_did})
    minter = parties.minter(resolve_service_did=directory)
    delegation = parties.delegation()

    answer = await minter.create_invocation_from_delegation(
        delegation.to_base64(), SERVICE_URL, {"with": "ixo:memory", "can": "memory/read"}, now=NOW
    )

    assert list(answer) == ["invocation"]
    invocation = Delegation.from_base64(answer["invocation"])
    assert invocation.issuer == ORACLE
    assert invocation.audience == parties.service_did
    assert invocation.capabilities == ({"with": "ixo:memory", "can": "memory/read"},)
    assert invocation.ucan.proofs == (delegation.cid,)
    assert invocation.expiration == NOW + 3600
    assert invocation.ucan.nonce is None
    assert directory.asked == [SERVICE_URL]
    result = await validate_invocation(
        answer["invocation"],
        CapabilityDef("memory/read", protocol="ixo:"),
        "ixo:memory",
        audience=parties.service_did,
        root_issuers=[parties.user.did()],
        store=InMemoryInvocationStore(clock=Clock()),
        now=NOW,
        verifier=parties.service_verifier(),
    )
    assert result.ok is True


async def test_create_defaults_the_ability_and_honours_options(parties: Parties) -> None:
    minter = parties.minter(
        resolve_service_did=ServiceDirectory({SERVICE_URL: parties.service_did})
    )
    car = parties.delegation().to_base64()

    answer = await minter.create_invocation_from_delegation(
        car, SERVICE_URL, {"with": "ixo:sandbox"}, skip_cache=True, max_ttl_seconds=120, now=NOW
    )
    again = await minter.create_invocation_from_delegation(
        car, SERVICE_URL, {"with": "ixo:sandbox"}, skip_cache=True, max_ttl_seconds=120, now=NOW
    )

    invocation = Delegation.from_base64(answer["invocation"])
    assert invocation.capabilities == ({"with": "ixo:sandbox", "can": "*"},)
    assert invocation.expiration == NOW + 120
    assert invocation.ucan.nonce is not None
    assert NONCE.fullmatch(invocation.ucan.nonce)
    assert Delegation.from_base64(again["invocation"]).cid != invocation.cid
