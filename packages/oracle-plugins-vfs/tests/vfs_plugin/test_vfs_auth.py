"""Two-hop UCAN: the oracle's own invocation fetches the user's delegation from the UCAN
Store, and every worker request carries its own single-use invocation claiming the
route's minimum ability, proven by that delegation."""

from __future__ import annotations

from typing import Any

from oracle_plugins.vfs.testing import ROUTE_ABILITIES, UcanStoreDouble, VfsWorkerDouble
from oracle_ucan import Ed25519Signer

from .conftest import RuntimeFactory, call


async def test_each_call_claims_the_minimum_ability_once(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble, user_key: Ed25519Signer
) -> None:
    worker.put("/docs/a.md", "alpha\n")
    steps: list[tuple[str, dict[str, Any]]] = [
        ("vfs_search", {"q": "alpha"}),
        ("vfs_grep", {"q": "alpha"}),
        ("vfs_glob", {"pattern": "**/*.md"}),
        ("vfs_list", {"path": "/docs"}),
        ("vfs_read", {"path": "/docs/a.md"}),
        ("vfs_write", {"path": "/docs/b.md", "content": "b"}),
        ("vfs_write", {"path": "/docs/b.md", "content": "c", "overwrite": True}),
        ("vfs_edit", {"path": "/docs/b.md", "oldString": "c", "newString": "d"}),
        ("vfs_move", {"from": "/docs/b.md", "to": "/docs/c.md"}),
        ("vfs_share", {"path": "/docs/c.md"}),
        ("vfs_share", {"path": "/docs"}),
        ("vfs_delete", {"paths": ["/docs/c.md"]}),
    ]
    async with vfs_runtime() as rt:
        for tool, args in steps:
            answer = await call(rt, tool, args)
            assert not answer.startswith(("Access", "The file store", "The user")), answer
    routes = {(c.method, c.route) for c in worker.calls}
    assert routes == set(ROUTE_ABILITIES) - {("GET", "/files/{id}/content")}
    for record in worker.calls:
        assert record.ability == ROUTE_ABILITIES[(record.method, record.route)], record
        assert record.user == user_key.did()
    # The double keeps every invocation single-use: none was refused as a replay.
    assert worker.rejected == []


async def test_a_replayed_invocation_is_refused_by_the_double(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble, store: UcanStoreDouble
) -> None:
    """The double's single-use check is real: a bearer sent twice fails the second time."""
    import httpx

    async with vfs_runtime() as rt:
        await call(rt, "vfs_list")
        ctx = (await rt.build()).context.runtime_context
        assert ctx is not None
        assert ctx.ucan is not None
        delegation = store._delegations[0][2]
        minted = await ctx.ucan.create_invocation_from_delegation(
            delegation, worker.base_url, "ixo:filesystem", can="fs/list"
        )
    headers = {"Authorization": f"Bearer {minted['invocation']}", "X-Auth-Type": "ucan"}
    async with httpx.AsyncClient(base_url=worker.base_url) as http:
        first = await http.get("/api/fs/tree", params={"path": "/"}, headers=headers)
        second = await http.get("/api/fs/tree", params={"path": "/"}, headers=headers)
        no_bearer = await http.get("/api/fs/tree", params={"path": "/"})
    assert (first.status_code, second.status_code, no_bearer.status_code) == (200, 401, 401)
    assert worker.rejected == ["REPLAY", "not a ucan bearer"]


async def test_the_store_is_asked_with_the_oracles_own_invocation_and_kept(
    vfs_runtime: RuntimeFactory,
    worker: VfsWorkerDouble,
    store: UcanStoreDouble,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    async with vfs_runtime() as rt:
        await call(rt, "vfs_list")
        await call(rt, "vfs_glob", {"pattern": "*"})
        await rt.list_tools()
    [asked] = store.calls  # one lookup: the delegation is kept for the later calls
    assert asked.ok
    assert asked.status == 200
    assert asked.params == {
        "audience": oracle_key.did(),
        "issuer": user_key.did(),
        "with": "ixo:filesystem",
    }
    assert store.rejected == []


async def test_a_store_that_refuses_the_oracle_leaves_no_tools_and_reports_it(
    vfs_runtime: RuntimeFactory, store: UcanStoreDouble
) -> None:
    store.fail_status = 503
    async with vfs_runtime() as rt:
        built = await rt.build("hi")
    assert not [name for name in built.tool_infos if name.startswith("vfs_")]
    assert ("vfs", "Files (VFS)") in built.degraded
    assert [c.status for c in store.calls] == [503, 503]  # a GET: once more, then given up


async def test_without_a_grant_or_a_key_there_are_no_tools(
    vfs_runtime: RuntimeFactory,
    store: UcanStoreDouble,
    worker: VfsWorkerDouble,
    user_key: Ed25519Signer,
) -> None:
    store.withheld.add(user_key.did())
    async with vfs_runtime() as rt:
        built = await rt.build("hi")
        assert not [n for n in built.tool_infos if n.startswith("vfs_")]
        assert built.degraded == []
    store.withheld.clear()
    async with vfs_runtime(signer=False) as rt:
        keyless = await rt.build("hi")
    assert not [n for n in keyless.tool_infos if n.startswith("vfs_")]
    assert len(store.calls) == 1  # without a key nothing is asked
    assert worker.calls == []


async def test_the_store_double_checks_its_own_invocation(
    vfs_runtime: RuntimeFactory, store: UcanStoreDouble, oracle_key: Ed25519Signer
) -> None:
    """Only the oracle's own ``store/get`` invocation, asking for delegations addressed to
    the oracle itself, gets an answer."""
    import httpx

    async with vfs_runtime() as rt:
        ctx = (await rt.build()).context.runtime_context
        assert ctx is not None
        assert ctx.ucan is not None
        own = await ctx.ucan.mint_oracle_invocation(store.base_url, "store/get")
        other = await ctx.ucan.mint_oracle_invocation(store.base_url, "store/get")
        wrong_ability = await ctx.ucan.mint_oracle_invocation(store.base_url, "store/put")
    assert own
    assert other
    assert wrong_ability
    query = {"audience": oracle_key.did(), "issuer": "did:key:z6Mkanyone", "with": "ixo:filesystem"}
    async with httpx.AsyncClient(base_url=store.base_url) as http:

        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}

        good = await http.get("/api/delegations", params=query, headers=bearer(own))
        replay = await http.get("/api/delegations", params=query, headers=bearer(own))
        foreign = await http.get(
            "/api/delegations",
            params={**query, "audience": "did:ixo:ixo1someotheroracle"},
            headers=bearer(other),
        )
        ability = await http.get("/api/delegations", params=query, headers=bearer(wrong_ability))
        anonymous = await http.get("/api/delegations", params=query)
    assert (good.status_code, good.json()) == (200, {"delegations": []})
    assert [replay.status_code, foreign.status_code, ability.status_code] == [401, 403, 401]
    assert anonymous.status_code == 401
    assert store.rejected[:2] == ["REPLAY", "audience"]
