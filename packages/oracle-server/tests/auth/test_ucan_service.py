"""``rt_ctx.ucan`` in ixo mode (UCAN-27 … 33): grants from the adopted delegation, minting
checked by the validator a downstream service would run, and the re-authorisation hook."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from oracle_core import (
    CapabilityDeniedError,
    OraclePlugin,
    PluginContext,
    PluginTool,
    RuntimeContext,
    UserInfo,
    plugin_tool,
)
from oracle_server import create_oracle_app
from oracle_server._auth.ucan_service import IxoUcanService
from oracle_server.testing import LoopbackServer, OpenAIDouble, Step, ToolCalls, serving
from oracle_ucan import (
    CapabilityDef,
    ChainVerifier,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    LocalResolver,
    delegate,
    invoke,
    validate_invocation,
)

ORACLE_DID = "did:ixo:ixo1ucanserviceoracle"
SERVICE_DID = "did:web:memory.example"
MEMORY = {"with": "ixo:memory", "can": "memory/*"}
ORACLE_KEY = Ed25519Signer.generate()


def user_delegation(
    user: Ed25519Signer, *, audience: str = ORACLE_DID, expiration: int | None = None
) -> str:
    expiry = int(time.time()) + 3600 if expiration is None else expiration
    return delegate(user, audience=audience, capabilities=[MEMORY], expiration=expiry).to_base64()


def service(prompts: list[str] | None = None, signer: Ed25519Signer | None = ORACLE_KEY) -> Any:
    async def reauth(user_did: str) -> None:
        if prompts is not None:
            prompts.append(user_did)

    return IxoUcanService(oracle_did=ORACLE_DID, signer=lambda: signer, reauth=reauth)


def test_capabilities_come_from_the_users_delegation() -> None:
    user = Ed25519Signer.generate()
    ucan = service().for_user(UserInfo(did=user.did(), ucan_delegation=user_delegation(user)))
    assert ucan.has_capability("ixo:memory", "memory/search")
    assert ucan.has_capability("ixo:memory", "memory/*")
    assert not ucan.has_capability("ixo:memory", "*")
    assert not ucan.has_capability("ixo:sandbox", "memory/search")
    ucan.require_capability("ixo:memory", "memory/add")
    with pytest.raises(CapabilityDeniedError):
        ucan.require_capability("ixo:sandbox", "sandbox/run")


@pytest.mark.parametrize("case", ["none", "expired", "other audience", "other issuer", "garbage"])
def test_an_unusable_delegation_grants_nothing(case: str) -> None:
    user, stranger = Ed25519Signer.generate(), Ed25519Signer.generate()
    raw = {
        "none": None,
        "expired": user_delegation(user, expiration=int(time.time()) - 5),
        "other audience": user_delegation(user, audience="did:ixo:ixo1someoneelse"),
        "other issuer": user_delegation(stranger),
        "garbage": "not a delegation",
    }[case]
    ucan = service().for_user(UserInfo(did=user.did(), ucan_delegation=raw))
    assert not ucan.has_capability("ixo:memory", "memory/search")


async def test_a_minted_invocation_passes_the_services_validator() -> None:
    user = Ed25519Signer.generate()
    ucan = service().for_user(UserInfo(did=user.did(), ucan_delegation=user_delegation(user)))
    token = await ucan.mint_invocation(SERVICE_DID, "ixo:memory", can="memory/search")
    assert token is not None
    assert await ucan.mint_invocation(SERVICE_DID, "ixo:memory", can="memory/search") == token
    fresh = await ucan.mint_invocation(
        SERVICE_DID, "ixo:memory", can="memory/search", skip_cache=True
    )
    assert fresh not in (None, token)

    resolver = LocalResolver()
    resolver.register(ORACLE_DID, ORACLE_KEY.did().removeprefix("did:key:"))
    result = await validate_invocation(
        token,
        CapabilityDef(can="memory/search", protocol="ixo:"),
        "ixo:memory",
        audience=SERVICE_DID,
        root_issuers=[user.did()],
        store=InMemoryInvocationStore(),
        verifier=ChainVerifier(resolver),
    )
    assert result.ok, result.error
    assert list(result.proof_chain) == [user.did(), ORACLE_DID]
    minted = Delegation.from_base64(token)
    assert minted.issuer == ORACLE_DID
    assert minted.audience == SERVICE_DID


async def test_an_invocation_from_a_fetched_delegation_claims_the_ability_asked_for() -> None:
    """A delegation fetched elsewhere (a UCAN store) proves an invocation that claims only
    the ability the call needs, addressed to the service's resolved ``did:web``."""
    user = Ed25519Signer.generate()
    grant = delegate(
        user,
        audience=ORACLE_DID,
        capabilities=[{"with": "ixo:filesystem", "can": "*"}],
        expiration=int(time.time()) + 3600,
    ).to_base64()
    ucan = service().for_user(UserInfo(did=user.did()))
    did_web = "did:web:vfs.example"

    async def did_document(request: Request) -> JSONResponse:
        return JSONResponse({"id": did_web})

    async with LoopbackServer([Route("/.well-known/did.json", did_document)]) as vfs:
        answer = await ucan.create_invocation_from_delegation(
            grant, vfs.origin, "ixo:filesystem", can="fs/read", max_ttl_seconds=60
        )
        default = await ucan.create_invocation_from_delegation(grant, vfs.origin, "ixo:filesystem")

    assert list(answer) == ["invocation"], answer
    minted = Delegation.from_base64(answer["invocation"])
    assert minted.capabilities == ({"with": "ixo:filesystem", "can": "fs/read"},)
    assert minted.audience == did_web
    assert minted.issuer == ORACLE_DID
    assert Delegation.from_base64(default["invocation"]).capabilities == (
        {"with": "ixo:filesystem", "can": "*"},
    )
    resolver = LocalResolver()
    resolver.register(ORACLE_DID, ORACLE_KEY.did().removeprefix("did:key:"))
    result = await validate_invocation(
        answer["invocation"],
        CapabilityDef(can="fs/read", protocol="ixo:"),
        "ixo:filesystem",
        audience=did_web,
        root_issuers=[user.did()],
        store=InMemoryInvocationStore(),
        verifier=ChainVerifier(resolver),
    )
    assert result.ok, result.error


async def test_invocations_from_a_fetched_delegation_are_single_use() -> None:
    """Two calls in one second give two invocations: a service refusing replays takes both."""
    user = Ed25519Signer.generate()
    grant = delegate(
        user,
        audience=ORACLE_DID,
        capabilities=[{"with": "ixo:filesystem", "can": "*"}],
        expiration=int(time.time()) + 3600,
    ).to_base64()
    ucan = service().for_user(UserInfo(did=user.did()))
    did_web = "did:web:vfs.example"

    async def did_document(request: Request) -> JSONResponse:
        return JSONResponse({"id": did_web})

    resolver = LocalResolver()
    resolver.register(ORACLE_DID, ORACLE_KEY.did().removeprefix("did:key:"))
    store = InMemoryInvocationStore()
    async with LoopbackServer([Route("/.well-known/did.json", did_document)]) as vfs:
        tokens = [
            (
                await ucan.create_invocation_from_delegation(
                    grant, vfs.origin, "ixo:filesystem", can="fs/read"
                )
            )["invocation"]
            for _ in range(2)
        ]

    assert tokens[0] != tokens[1]
    for token in tokens:
        result = await validate_invocation(
            token,
            CapabilityDef(can="fs/read", protocol="ixo:"),
            "ixo:filesystem",
            audience=did_web,
            root_issuers=[user.did()],
            store=store,
            verifier=ChainVerifier(resolver),
        )
        assert result.ok, result.error


async def test_an_invocation_on_the_oracles_own_authority_needs_no_user_grant() -> None:
    """For a service that serves the oracle itself (a UCAN store): ``with`` is the oracle's
    DID, no proofs, single-use, addressed to the service's ``did:web``."""
    user = Ed25519Signer.generate()
    ucan = service().for_user(UserInfo(did=user.did()))  # no delegation at all
    did_web = "did:web:store.example"

    async def did_document(request: Request) -> JSONResponse:
        return JSONResponse({"id": did_web})

    async with LoopbackServer([Route("/.well-known/did.json", did_document)]) as store_server:
        first = await ucan.mint_oracle_invocation(store_server.origin, "store/get")
        second = await ucan.mint_oracle_invocation(store_server.origin, "store/get")
    keyless = service(signer=None).for_user(UserInfo(did=user.did()))
    assert await keyless.mint_oracle_invocation("http://127.0.0.1:9", "store/get") is None

    assert first is not None
    assert second is not None
    assert first != second
    minted = Delegation.from_base64(first)
    assert minted.issuer == ORACLE_DID
    assert minted.audience == did_web
    assert minted.capabilities == ({"with": ORACLE_DID, "can": "store/get"},)
    assert minted.proofs() == []
    resolver = LocalResolver()
    resolver.register(ORACLE_DID, ORACLE_KEY.did().removeprefix("did:key:"))
    result = await validate_invocation(
        first,
        CapabilityDef(can="store/get", protocol="did:"),
        ORACLE_DID,
        audience=did_web,
        root_issuers=[ORACLE_DID],
        store=InMemoryInvocationStore(),
        verifier=ChainVerifier(resolver),
    )
    assert result.ok, result.error


async def test_minting_degrades_and_asks_to_reauthorise() -> None:
    user = Ed25519Signer.generate()
    prompts: list[str] = []
    no_delegation = service(prompts).for_user(UserInfo(did=user.did()))
    assert await no_delegation.mint_invocation(SERVICE_DID, "ixo:memory") is None
    await asyncio.sleep(0)  # the prompt runs in the background
    assert prompts == [user.did()]

    granted = UserInfo(did=user.did(), ucan_delegation=user_delegation(user))
    ungranted = service(prompts).for_user(granted)
    assert await ungranted.mint_invocation(SERVICE_DID, "ixo:sandbox", can="sandbox/run") is None
    keyless = service(prompts, signer=None).for_user(granted)
    assert not keyless.has_signing_key()
    assert await keyless.mint_invocation(SERVICE_DID, "ixo:memory", can="memory/search") is None
    assert prompts == [user.did()]  # only a missing or expired delegation asks again


class MintArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ability: str


class MintingPlugin(OraclePlugin):
    """A plugin that mints for a downstream service, as the memory plugin does."""

    name = "minting"
    version = "1.0.0"
    manifest = {
        "title": "Minting",
        "summary": "Mints invocations.",
        "when_to_use": ["A service needs a token"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="mint_for_service", description="Mint.", args_schema=MintArgs)
        async def mint_for_service(args: MintArgs, rt_ctx: RuntimeContext[Any]) -> str:
            assert rt_ctx.ucan is not None
            token = await rt_ctx.ucan.mint_invocation(SERVICE_DID, "ixo:memory", can=args.ability)
            return "minted" if token else "no token"

        return [mint_for_service]


async def test_a_turn_adopts_the_stored_delegation(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    mnemonic = "ucan service test mnemonic"
    env = {
        "ORACLE_BACKEND": "ixo",
        "MATRIX_ENABLED": "false",
        "ORACLE_SIGNING_MNEMONIC": mnemonic,
        "ORACLE_NAME": "Ucan Oracle",
        "NETWORK": "devnet",
        "ORACLE_DID": ORACLE_DID,
        "ORACLE_ENTITY_DID": "did:ixo:entity:ucan",
        "BLOCKSYNC_GRAPHQL_URL": "http://127.0.0.1:9/graphql",
        "SECP_MNEMONIC": "unused",
        "RPC_URL": "http://127.0.0.1:9",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "THROTTLE_LIMIT": "1000",
    }
    steps: list[Step] = [
        ToolCalls([("mint_for_service", {"ability": "memory/search"})]),
        "done",
        ToolCalls([("mint_for_service", {"ability": "memory/search"})]),
        "done",
    ]
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "Ucan Oracle"},
            plugins=[MintingPlugin()],
            env={**env, **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        token = invoke(
            user,
            audience=ORACLE_DID,
            capability={"with": user.did(), "can": "*"},
            expiration=int(time.time()) + 600,
        ).to_base64()
        headers = {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
        ):
            session = (await http.post("/sessions")).json()["sessionId"]
            await http.post(f"/messages/{session}", json={"message": "mint please"})
            assert llm.requests[1].messages[-1]["content"] == "no token"

            stored = await http.post("/delegation", json={"raw": user_delegation(user)})
            assert stored.status_code in (200, 201), stored.text
            await http.post(f"/messages/{session}", json={"message": "again"})
            assert llm.requests[3].messages[-1]["content"] == "minted"
    assert Ed25519Signer.from_mnemonic(mnemonic).did() != ORACLE_DID
