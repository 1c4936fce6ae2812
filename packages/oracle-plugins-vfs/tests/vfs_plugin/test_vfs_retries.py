"""The retry rules of 03-plugins §17.5, counted at the worker double: a GET once more on
429, 5xx or a network failure; any request once more on 401 with a new invocation; a
write once more on 409 "modified concurrently"; nothing else is retried."""

from __future__ import annotations

import pytest

from oracle_plugins.vfs.testing import VfsWorkerDouble

from .conftest import RuntimeFactory, call

CONCURRENT = {"error": "the file was modified concurrently", "code": "conflict"}


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_a_get_is_retried_once_on_429_and_5xx(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble, status: int
) -> None:
    worker.put("/a.md", "a\n")
    worker.fail(status, route="/search")
    async with vfs_runtime() as rt:
        answer = await call(rt, "vfs_search", {"q": "a"})
    assert answer.startswith("- /a.md")
    assert [c.status for c in worker.calls_to("/search")] == [status, 200]


async def test_a_get_fails_after_its_one_retry(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.fail(429, route="/search", times=5)
    async with vfs_runtime() as rt:
        answer = await call(rt, "vfs_search", {"q": "a"})
    assert answer.startswith("The file store is busy")
    assert [c.status for c in worker.calls_to("/search")] == [429, 429]


async def test_a_get_is_retried_once_after_a_network_failure(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.md", "a\n")
    # The first answer comes after the client's timeout: a network failure to it.
    worker.slow(2.0, route="/glob")
    async with vfs_runtime(config={"VFS_REQUEST_TIMEOUT_MS": "300"}) as rt:
        answer = await call(rt, "vfs_glob", {"pattern": "*.md"})
    assert answer == "/a.md"
    # Both requests reached the worker; the first one's answer was given up on.
    assert len([f for f in worker.faults if f.times == 0]) == 1
    assert worker.calls_to("/glob")[-1].status == 200


@pytest.mark.parametrize("status", [429, 503])
async def test_a_write_is_not_retried_on_429_or_5xx(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble, status: int
) -> None:
    worker.fail(status, route="/files", method="POST")
    async with vfs_runtime() as rt:
        answer = await call(rt, "vfs_write", {"path": "/a.md", "content": "a"})
    assert answer.startswith("The file store is")
    assert [c.status for c in worker.calls_to("/files")] == [status]
    assert not worker.exists("/a.md")


@pytest.mark.parametrize(
    ("tool", "args", "route"),
    [
        ("vfs_list", {}, "/tree"),
        ("vfs_write", {"path": "/b.md", "content": "b"}, "/files"),
        ("vfs_delete", {"paths": ["/a.md"]}, "/batch/delete"),
    ],
)
async def test_any_request_is_retried_once_on_401_with_a_new_invocation(
    vfs_runtime: RuntimeFactory,
    worker: VfsWorkerDouble,
    tool: str,
    args: dict[str, object],
    route: str,
) -> None:
    worker.put("/a.md", "a")
    worker.fail(401, route=route)
    async with vfs_runtime() as rt:
        answer = await call(rt, tool, args)
    assert "not granted" not in answer, answer
    assert "unavailable" not in answer, answer
    assert [c.status for c in worker.calls_to(route)][:2] == [
        401,
        200 if route != "/files" else 201,
    ]
    # The retry was a fresh invocation: the double accepts each one once only.
    assert worker.rejected == []


async def test_a_write_is_retried_once_on_a_concurrent_modification(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.txt", "one two")
    worker.fail(409, route="/files/{id}/edit", body=CONCURRENT)
    async with vfs_runtime() as rt:
        answer = await call(
            rt, "vfs_edit", {"path": "/a.txt", "oldString": "two", "newString": "2"}
        )
        worker.fail(409, route="/files/{id}/edit", body=CONCURRENT, times=2)
        twice = await call(rt, "vfs_edit", {"path": "/a.txt", "oldString": "one", "newString": "1"})
    assert answer == "Edited /a.txt: 1 replacement."
    assert twice.startswith("/a.txt was changed by someone else at the same time")
    assert [c.status for c in worker.calls_to("/files/{id}/edit")] == [409, 200, 409, 409]
    assert worker.text("/a.txt") == "one 2"


async def test_other_conflicts_are_not_retried(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.md", "a")
    async with vfs_runtime() as rt:
        answer = await call(rt, "vfs_write", {"path": "/a.md", "content": "b"})
    assert "already exists" in answer
    assert [c.status for c in worker.calls_to("/files")] == [409]
