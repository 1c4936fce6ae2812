"""Tests of the ambient services core ships for the local backend and tests (CORE-44 … 49)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from oracle_core import (
    Blob,
    CapabilityDeniedError,
    CapabilityGrant,
    EventSink,
    InMemoryBlobStore,
    LocalSecretsService,
    NotConfiguredError,
    OracleEvent,
    PermissiveUcanService,
    RecordingEventSink,
    SecretIndexEntry,
    ServiceUnavailableError,
    SqliteSecretsService,
    UcanAccessor,
    UserInfo,
    create_runtime,
)
from oracle_core._matrix import LocalMatrixService, UnavailableMatrixService

# --- fixtures -------------------------------------------------------------------------

ALICE = "did:key:alice"
BOB = "did:key:bob"
BLOB_ID = re.compile(r"^blob_[0-9a-f]{16}$")


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> InMemoryBlobStore:
    return InMemoryBlobStore(clock=clock)


class FakeMinter:
    """Stands in for the chain-backed UCAN signer the server supplies."""

    def __init__(self) -> None:
        self.mints: list[tuple[str, str, str, bool]] = []
        self.delegations: list[tuple[str, str, str, int | None]] = []
        self.delegation_abilities: list[str] = []

    def has_capability(self, resource: str, action: str) -> bool:
        return False

    def require_capability(self, resource: str, action: str) -> None:
        raise CapabilityDeniedError(resource, action)

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str:
        self.mints.append((did, capability, can, skip_cache))
        return f"car-for-{did}"

    async def resolve_service_did(self, url: str) -> str:
        return f"did:web:{url.removeprefix('https://')}"

    def has_signing_key(self) -> bool:
        return True

    async def mint_oracle_invocation(
        self, service_url: str, can: str, *, with_: str | None = None
    ) -> str | None:
        return f"own-{can}-{with_}"

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
        can: str = "*",
    ) -> dict[str, str]:
        self.delegations.append((car, service_url, capability, max_ttl_seconds))
        self.delegation_abilities.append(can)
        return {"invocation": f"inv-{car}"}


class MinterWithoutAbility(FakeMinter):
    """A minter written before ``create_invocation_from_delegation`` took ``can``."""

    async def create_invocation_from_delegation(  # type: ignore[override]
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
    ) -> dict[str, str]:
        self.delegations.append((car, service_url, capability, max_ttl_seconds))
        return {"invocation": f"old-{car}"}


def ucan_for(
    grants: Sequence[CapabilityGrant] | None, minter: UcanAccessor | None = None
) -> UcanAccessor:
    return PermissiveUcanService(grants=grants, minter=minter).for_user(UserInfo(did=ALICE))


# --- blob store (CORE-44) -------------------------------------------------------------


async def test_put_returns_distinct_well_formed_ids(store: InMemoryBlobStore) -> None:
    first = await store.put(user_did=ALICE, name="car", value="secret-1")
    second = await store.put(user_did=ALICE, name="car", value="secret-2")

    assert BLOB_ID.fullmatch(first)
    assert BLOB_ID.fullmatch(second)
    assert first != second
    assert store.is_valid_blob_id(first)


async def test_get_returns_the_owner_blob(store: InMemoryBlobStore, clock: FakeClock) -> None:
    blob_id = await store.put(user_did=ALICE, name="jwt", value="eyJ.secret")

    blob = await store.get(user_did=ALICE, blob_id=blob_id)

    assert blob == Blob(
        blob_id=blob_id, user_did=ALICE, name="jwt", value="eyJ.secret", expires_at=4600.0
    )


@pytest.mark.parametrize(
    "value",
    [
        "blob_0123456789abcdef",
        "blob_ffffffffffffffff",
    ],
)
def test_is_valid_blob_id_accepts_the_format(store: InMemoryBlobStore, value: str) -> None:
    assert store.is_valid_blob_id(value) is True


@pytest.mark.parametrize(
    "value",
    [
        "blob_0123456789ABCDEF",  # upper case
        "blob_0123456789abcde",  # 15 hex digits
        "blob_0123456789abcdef0",  # 17 hex digits
        "blob_0123456789abcdeg",  # not hex
        "blb_0123456789abcdef",
        " blob_0123456789abcdef",
        "",
    ],
)
def test_is_valid_blob_id_rejects_other_shapes(store: InMemoryBlobStore, value: str) -> None:
    assert store.is_valid_blob_id(value) is False


async def test_default_ttl_is_one_hour(store: InMemoryBlobStore, clock: FakeClock) -> None:
    blob_id = await store.put(user_did=ALICE, name="n", value="v")

    clock.advance(3599)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is not None
    clock.advance(1)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is None


async def test_explicit_ttl_is_honoured(store: InMemoryBlobStore, clock: FakeClock) -> None:
    blob_id = await store.put(user_did=ALICE, name="n", value="v", ttl_seconds=30)

    clock.advance(29.5)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is not None
    clock.advance(0.5)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is None


async def test_ttl_is_clamped_to_one_day(store: InMemoryBlobStore, clock: FakeClock) -> None:
    blob_id = await store.put(user_did=ALICE, name="n", value="v", ttl_seconds=10 * 86400)

    clock.advance(86399)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is not None
    clock.advance(1)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is None


async def test_expired_blob_stays_gone_when_the_clock_is_read_again(
    store: InMemoryBlobStore, clock: FakeClock
) -> None:
    blob_id = await store.put(user_did=ALICE, name="n", value="v", ttl_seconds=10)
    clock.advance(10)
    assert await store.get(user_did=ALICE, blob_id=blob_id) is None

    clock.now -= 5  # even if the clock were read earlier again, the blob was dropped
    assert await store.get(user_did=ALICE, blob_id=blob_id) is None


async def test_other_users_and_unknown_ids_get_nothing(store: InMemoryBlobStore) -> None:
    blob_id = await store.put(user_did=ALICE, name="n", value="v")

    assert await store.get(user_did=BOB, blob_id=blob_id) is None
    assert await store.get(user_did=ALICE, blob_id="blob_0000000000000000") is None
    assert await store.get(user_did=ALICE, blob_id="not-a-blob") is None
    # A foreign read does not consume or damage the owner's blob.
    owned = await store.get(user_did=ALICE, blob_id=blob_id)
    assert owned is not None
    assert owned.value == "v"


async def test_put_without_a_user_is_refused(store: InMemoryBlobStore) -> None:
    with pytest.raises(ValueError, match=r"rt_ctx\.user\.did"):
        await store.put(user_did="", name="n", value="v")


# --- secrets --------------------------------------------------------------------------


async def test_local_secrets_are_per_user_with_shared_defaults() -> None:
    service = LocalSecretsService(
        values_by_user={ALICE: {"API_KEY": "alice-key", "TOKEN": "t"}},
        shared_values={"API_KEY": "shared-key", "REGION": "eu"},
    )
    alice = service.for_user(UserInfo(did=ALICE))
    bob = service.for_user(UserInfo(did=BOB))

    assert await alice.get_index() == [
        SecretIndexEntry(name="API_KEY"),
        SecretIndexEntry(name="REGION"),
        SecretIndexEntry(name="TOKEN"),
    ]
    assert await alice.get_values(["API_KEY", "MISSING", "REGION"]) == {
        "API_KEY": "alice-key",
        "REGION": "eu",
    }
    assert await bob.get_values(["API_KEY", "TOKEN"]) == {"API_KEY": "shared-key"}


async def test_default_local_secrets_are_empty() -> None:
    accessor = LocalSecretsService().for_user(UserInfo(did=ALICE))

    assert await accessor.get_index() == []
    assert await accessor.get_values(["ANY"]) == {}


# --- UCAN (CORE-45, 49) ---------------------------------------------------------------


def test_permissive_ucan_grants_everything_by_default() -> None:
    ucan = ucan_for(None)

    assert ucan.has_capability("ixo:entity:1", "*") is True
    assert ucan.has_capability("anything", "entity/delete") is True
    ucan.require_capability("anything", "*")


def test_grants_are_matched_on_resource_and_ability() -> None:
    ucan = ucan_for(
        [
            CapabilityGrant(with_="ixo:entity:1", can="entity/read"),
            CapabilityGrant(with_="ucan:*", can="blocksync/*"),
        ]
    )

    assert ucan.has_capability("ixo:entity:1", "entity/read") is True
    assert ucan.has_capability("ixo:entity:1", "entity/write") is False
    assert ucan.has_capability("ixo:entity:2", "entity/read") is False
    assert ucan.has_capability("any-resource", "blocksync/query") is True
    # The default claim `*` needs a `*` grant.
    assert ucan.has_capability("ixo:entity:1", "*") is False


def test_star_grant_satisfies_the_default_claim() -> None:
    ucan = ucan_for([CapabilityGrant(with_="ucan:*", can="*")])

    assert ucan.has_capability("ixo:entity:1", "*") is True


def test_a_bare_star_resource_is_not_a_wildcard() -> None:
    # ucanto's rule: only `ucan:*` means any resource; `*` names a resource literally.
    ucan = ucan_for([CapabilityGrant(with_="*", can="*")])

    assert ucan.has_capability("ixo:memory", "memory/read") is False
    assert ucan.has_capability("*", "memory/read") is True
    with pytest.raises(CapabilityDeniedError):
        ucan.require_capability("ixo:memory", "memory/read")


def test_require_capability_raises_capability_denied() -> None:
    ucan = ucan_for([CapabilityGrant(with_="ixo:entity:1", can="entity/read")])

    with pytest.raises(CapabilityDeniedError) as info:
        ucan.require_capability("ixo:entity:1", "entity/write")

    assert info.value.code == "ucan.capability_denied"
    assert info.value.resource == "ixo:entity:1"
    assert info.value.action == "entity/write"
    assert "entity/write" in str(info.value)


def test_no_grants_means_nothing_is_granted() -> None:
    ucan = ucan_for([])

    assert ucan.has_capability("x", "y") is False
    with pytest.raises(CapabilityDeniedError):
        ucan.require_capability("x", "y")


async def test_minting_is_not_configured_without_a_minter() -> None:
    ucan = ucan_for(None)

    assert ucan.has_signing_key() is False
    with pytest.raises(NotConfiguredError) as info:
        await ucan.mint_invocation("did:web:svc", "entity/read")
    assert info.value.code == "service.not_configured"
    assert info.value.hint is not None
    with pytest.raises(NotConfiguredError):
        await ucan.resolve_service_did("https://svc.example")
    result = await ucan.create_invocation_from_delegation("car", "https://svc", "entity/read")
    assert set(result) == {"error"}
    assert result["error"]


async def test_minting_is_delegated_to_a_configured_minter() -> None:
    minter = FakeMinter()
    ucan = ucan_for([CapabilityGrant(with_="ucan:*", can="entity/read")], minter)

    assert ucan.has_signing_key() is True
    assert await ucan.mint_invocation("did:web:svc", "entity/read", can="entity/read") == (
        "car-for-did:web:svc"
    )
    await ucan.mint_invocation("did:web:svc", "entity/read", skip_cache=True)
    assert await ucan.resolve_service_did("https://svc.example") == "did:web:svc.example"
    assert await ucan.create_invocation_from_delegation(
        "car-1", "https://svc", "entity/read", max_ttl_seconds=60
    ) == {"invocation": "inv-car-1"}

    assert minter.mints == [
        ("did:web:svc", "entity/read", "entity/read", False),
        ("did:web:svc", "entity/read", "*", True),
    ]
    assert minter.delegations == [("car-1", "https://svc", "entity/read", 60)]
    # Grants are still checked by the local accessor, not by the minter.
    assert ucan.has_capability("r", "entity/read") is True
    assert ucan.has_capability("r", "entity/write") is False


async def test_an_invocation_from_a_passed_delegation_claims_the_ability_asked_for() -> None:
    minter = FakeMinter()
    ucan = ucan_for(None, minter)

    await ucan.create_invocation_from_delegation("car-1", "https://vfs", "ixo:filesystem")
    await ucan.create_invocation_from_delegation(
        "car-2", "https://vfs", "ixo:filesystem", can="fs/read", max_ttl_seconds=60
    )

    assert minter.delegations == [
        ("car-1", "https://vfs", "ixo:filesystem", None),
        ("car-2", "https://vfs", "ixo:filesystem", 60),
    ]
    assert minter.delegation_abilities == ["*", "fs/read"]


async def test_a_minter_without_the_ability_keyword_still_mints_the_default() -> None:
    minter = MinterWithoutAbility()
    ucan = ucan_for(None, minter)  # type: ignore[arg-type]

    answer = await ucan.create_invocation_from_delegation("car-1", "https://svc", "ixo:x")

    assert answer == {"invocation": "old-car-1"}
    assert minter.delegations == [("car-1", "https://svc", "ixo:x", None)]


# --- Matrix (CORE-49) -----------------------------------------------------------------


async def test_local_matrix_raises_not_configured() -> None:
    matrix = UnavailableMatrixService().for_user(UserInfo(did=ALICE))

    with pytest.raises(NotConfiguredError) as info:
        await matrix.post_to_room("!room:server", {"body": "hi"})
    assert info.value.code == "service.not_configured"
    assert "not configured" in info.value.message
    assert info.value.hint is not None
    assert "ORACLE_BACKEND" in info.value.hint
    # "Off" is not "down": a plugin catching ServiceUnavailableError for an outage must
    # not mistake a deployment without Matrix for one.
    assert not isinstance(info.value, ServiceUnavailableError)
    calls = [
        matrix.get_room_state("!room:server"),
        matrix.get_event_by_id("!room:server", "$event"),
        matrix.user_room_id(),
        matrix.get_state_event("!room:server", "m.room.name"),
        matrix.set_state_event("!room:server", "m.room.name", {"name": "x"}),
    ]
    for call in calls:
        with pytest.raises(NotConfiguredError):
            await call


# --- events ---------------------------------------------------------------------------


def test_recording_event_sink_keeps_events_in_order() -> None:
    sink = RecordingEventSink()
    first = OracleEvent(name="tool_call", payload={"a": 1}, session_id="s")
    second = OracleEvent(name="router", payload={"preloaded": ["x"]})

    sink.emit(first)
    sink.emit(second)

    assert isinstance(sink, EventSink)
    assert sink.events == [first, second]
    assert sink.names() == ["tool_call", "router"]


# --- the local backend wires these services (CORE-49) ---------------------------------


async def test_local_backend_boots_with_local_services(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "local-model",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }
    with caplog.at_level(logging.INFO, logger="oracle.services-test"):
        runtime = await create_runtime(
            {"name": "Local Oracle"},
            discover_entry_points=False,
            env=env,
            logger=logging.getLogger("oracle.services-test"),
        )
    async with runtime:
        ambient = runtime.ambient
        user = UserInfo(did=ALICE)
        assert isinstance(ambient.blob_store, InMemoryBlobStore)
        assert isinstance(ambient.secrets, SqliteSecretsService)
        assert await ambient.secrets.for_user(user).get_index() == []
        await ambient.secrets.for_user(user).put("API_KEY", "v")
        assert (tmp_path / "user_secrets.db").exists()
        # Matrix is the local store: plugins' rooms work, but there is no "user's room"
        # (that one belongs to the IXO client), so user-room data falls back locally.
        assert isinstance(ambient.matrix, LocalMatrixService)
        with pytest.raises(NotConfiguredError):
            await ambient.matrix.for_user(user).user_room_id()
        ucan = ambient.ucan.for_user(user)
        assert ucan.has_capability("anything", "*") is True
        assert ucan.has_signing_key() is False

    assert any("permissive" in r.getMessage() for r in caplog.records)
