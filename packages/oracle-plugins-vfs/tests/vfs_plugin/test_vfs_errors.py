"""Path rules refused before any request, and every failure mapped to what the model
reads (03-plugins §17.5): access is never called missing, and the grant steps name the
oracle's DID."""

from __future__ import annotations

from typing import Any

import pytest

from oracle_plugins.vfs import GRANT_STEPS, VfsError, error_text
from oracle_plugins.vfs.testing import UcanStoreDouble, VfsWorkerDouble
from oracle_ucan import Ed25519Signer

from .conftest import RuntimeFactory, call

BAD_PATHS = ["notes/a.md", "/a//b", "/a/", "/a/../b", "/a/./b", "/a\x00b", "/" + "x" * 1024]


@pytest.mark.parametrize("bad", BAD_PATHS)
async def test_path_rules_are_checked_before_any_request(
    vfs_runtime: RuntimeFactory,
    worker: VfsWorkerDouble,
    store: UcanStoreDouble,
    bad: str,
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("vfs_read", {"path": bad}),
        ("vfs_write", {"path": bad, "content": "x"}),
        ("vfs_edit", {"path": bad, "oldString": "a", "newString": "b"}),
        ("vfs_move", {"from": "/ok.txt", "to": bad}),
        ("vfs_move", {"from": bad, "to": "/ok.txt"}),
        ("vfs_delete", {"paths": ["/ok.txt", bad]}),
        ("vfs_share", {"path": bad}),
        ("vfs_list", {"path": bad}),
        ("vfs_search", {"q": "x", "path": bad}),
        ("vfs_grep", {"q": "x", "path": bad}),
    ]
    async with vfs_runtime() as rt:
        await rt.list_tools()  # the build asks the store once; the grant is then kept
        before = len(store.calls)
        answers = [await call(rt, tool, args) for tool, args in calls]
    assert all(a.startswith("Invalid path: ") for a in answers), answers
    assert worker.calls == []
    assert len(store.calls) == before


@pytest.mark.parametrize(
    ("status", "body", "tool", "expected"),
    [
        (403, None, "vfs_list", "Access denied for /notes: it is outside what the user granted"),
        (404, None, "vfs_list", "/notes was not found: it does not exist, or it is outside"),
        (413, None, "vfs_search", "Too large"),
        (415, None, "vfs_search", "The file store cannot do this"),
        (429, None, "vfs_write", "The file store is busy"),
        (503, None, "vfs_write", "The file store is unavailable"),
        (500, None, "vfs_write", "The file store is unavailable"),
        (409, {"error": "too many versions", "code": "version_limit"}, "vfs_write", "50 versions"),
    ],
)
async def test_statuses_map_to_their_kinds(
    vfs_runtime: RuntimeFactory,
    worker: VfsWorkerDouble,
    status: int,
    body: dict[str, Any] | None,
    tool: str,
    expected: str,
) -> None:
    worker.put("/notes/a.md", "a")
    args = {
        "vfs_list": {"path": "/notes"},
        "vfs_search": {"q": "a", "path": "/notes"},
        "vfs_write": {"path": "/notes/new.md", "content": "x"},
    }[tool]
    route = {"vfs_list": "/tree", "vfs_search": "/search", "vfs_write": "/files"}[tool]
    worker.fail(status, route=route, times=2, body=body)
    async with vfs_runtime() as rt:
        answer = await call(rt, tool, args)
    assert expected in answer, answer
    assert "encrypt" not in answer.lower()
    assert "zero-knowledge" not in answer.lower()


async def test_denied_is_never_described_as_missing(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/private/salary.xlsx", b"x")
    worker.put("/private/plan.md", "plan")
    worker.denied_prefixes.append("/private")
    async with vfs_runtime() as rt:
        listed = await call(rt, "vfs_list", {"path": "/private"})
        read = await call(rt, "vfs_read", {"path": "/private/plan.md"})
        missing = await call(rt, "vfs_read", {"path": "/public/none.md"})
    for answer in (listed, read):
        assert answer.startswith("Access denied for /private"), answer
        assert "not found" not in answer
        assert "does not exist" not in answer
    assert missing.startswith("/public/none.md was not found")


async def test_a_read_only_grant_refuses_writes_without_calling_the_worker(
    tmp_path: Any,
    worker: VfsWorkerDouble,
    vfs_runtime: RuntimeFactory,
    store: UcanStoreDouble,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    from .conftest import user_delegation

    store._delegations.clear()
    store.grant(
        user_delegation(
            user_key,
            oracle_key.did(),
            grants=[
                {"with": "ixo:filesystem", "can": "fs/read"},
                {"with": "ixo:filesystem", "can": "fs/list"},
            ],
        )
    )
    worker.put("/a.md", "a\n")
    async with vfs_runtime() as rt:
        read = await call(rt, "vfs_read", {"path": "/a.md"})
        write = await call(rt, "vfs_write", {"path": "/b.md", "content": "b"})
    assert read.startswith("/a.md (lines 1-1 of 1)")
    assert write.startswith("Access denied for /b.md")
    assert worker.calls_to("/files") == []


async def test_no_delegation_gives_the_grant_steps_and_the_oracle_did(
    vfs_runtime: RuntimeFactory,
    worker: VfsWorkerDouble,
    store: UcanStoreDouble,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    async with vfs_runtime(plugin=None) as rt:
        assert "vfs_list" in await rt.list_tools()
        # The user withdraws the grant; the cached one is refused, the store has none.
        store.withheld.add(user_key.did())
        worker.fail(401, route="/tree", times=2)
        answer = await call(rt, "vfs_list")
        assert "vfs_list" not in await rt.list_tools()
    assert answer.startswith("The user has not granted this oracle access to their files")
    assert GRANT_STEPS in answer
    assert answer.endswith(oracle_key.did())
    assert "Portal → the domain → Library → Files → Access → Manage access" in answer


def test_every_kind_has_words_and_none_claims_encryption() -> None:
    kinds = [
        "invalid_path", "no_delegation", "denied", "not_found", "exists", "not_unique",
        "no_match", "occupied", "version_limit", "conflict", "too_large", "unsupported",
        "busy", "unavailable",
    ]  # fmt: skip
    texts = {k: error_text(VfsError(k, "why"), oracle_did="did:x", path="/p") for k in kinds}  # type: ignore[arg-type]
    assert len(set(texts.values())) == len(kinds)
    for text in texts.values():
        assert "encrypt" not in text.lower()
        assert "zero-knowledge" not in text.lower()
    for access in ("denied", "no_delegation"):
        assert "not found" not in texts[access]
        assert "missing" not in texts[access]
    assert "did:x" in texts["no_delegation"]


async def test_bad_move_arguments_come_back_as_text(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    async with vfs_runtime() as rt:
        answer = await call(rt, "vfs_move", {"to": "/b.txt"})
        extra = await call(rt, "vfs_move", {"from": "/a", "to": "/b", "force": True})
    assert answer.startswith("Invalid arguments for vfs_move: from: Field required")
    assert "force: Extra inputs are not permitted" in extra
    assert worker.calls == []
