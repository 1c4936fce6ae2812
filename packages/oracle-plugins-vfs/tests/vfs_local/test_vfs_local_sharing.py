"""Users kept apart, public share tokens, and parallel writes in the embedded store."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from oracle_plugins.vfs._backend import DeleteResult, FileInfo, VfsError
from oracle_plugins.vfs._local import LocalVfs, LocalVfsStore

BASE_URL = "https://oracle.test"  # as the vfs fixture is made
_URL = re.compile(re.escape(BASE_URL) + r"/vfs/public/([A-Za-z0-9_-]{32})")


def token_of(url: str | None) -> str:
    assert url is not None
    found = _URL.fullmatch(url)
    assert found is not None, url
    return found.group(1)


async def test_users_never_see_each_other(
    vfs: LocalVfs, bob: LocalVfs, store: LocalVfsStore
) -> None:
    await vfs.write("/secret/plan.txt", b"alice's needle", "", overwrite=False)
    await bob.write("/mine.txt", b"bob's needle", "", overwrite=False)

    assert [node.path for node in await bob.list("/")] == ["/mine.txt"]
    assert await bob.glob("**") == ["/mine.txt"]
    assert [hit.path for hit in (await bob.search("needle")).hits] == ["/mine.txt"]
    assert [match.text for match in await bob.grep("needle")] == ["bob's needle"]
    refused = [
        bob.read("/secret/plan.txt", 1, 10),
        bob.content("/secret/plan.txt", 100),
        bob.edit("/secret/plan.txt", "alice", "bob", replace_all=False),
        bob.move("/secret/plan.txt", "/stolen.txt"),
        bob.share("/secret/plan.txt", public=True),
        bob.list("/secret"),
        bob.search("needle", "/secret"),
        bob.grep("needle", "/secret"),
        bob.versions("/secret/plan.txt"),
    ]
    for call in refused:
        with pytest.raises(VfsError) as caught:
            await call
        assert caught.value.kind == "not_found"
    assert await bob.delete(["/secret/plan.txt", "/secret"]) == [
        DeleteResult("/secret/plan.txt", "missing"),
        DeleteResult("/secret", "missing"),
    ]
    assert (await vfs.content("/secret/plan.txt", 100))[0] == b"alice's needle"
    # The same path is two files.
    await bob.write("/secret/plan.txt", b"bob's own", "", overwrite=False)
    assert (await vfs.content("/secret/plan.txt", 100))[0] == b"alice's needle"


async def test_user_folders_do_not_show_the_did(
    vfs: LocalVfs, bob: LocalVfs, store: LocalVfsStore
) -> None:
    await vfs.write("/a.txt", b"x", "", overwrite=False)
    names = [path.name for path in store.root.rglob("*")]
    assert not [name for name in names if "alice" in name or "did" in name]
    assert len(list((store.root / "users").iterdir())) == 2


async def test_share_publishes_a_file(vfs: LocalVfs, store: LocalVfsStore) -> None:
    await vfs.write("/docs/report.md", b"# Report", "", overwrite=False)

    url = await vfs.share("/docs/report.md", public=True)
    token = token_of(url)

    assert store.public_file(token) == (b"# Report", "text/markdown", "report.md")
    assert await store.read_public(token) == (b"# Report", "text/markdown", "report.md")
    assert await vfs.share("/docs/report.md", public=True) == url
    await vfs.write("/docs/report.md", b"# Report v2", "", overwrite=True)
    await vfs.move("/docs/report.md", "/report.md")
    assert await vfs.share("/report.md", public=True) == url
    assert store.public_file(token) == (b"# Report v2", "text/markdown", "report.md")

    assert await vfs.share("/report.md", public=False) is None
    assert store.public_file(token) is None
    again = token_of(await vfs.share("/report.md", public=True))
    assert again != token
    assert store.public_file(again) is not None


async def test_deleting_a_shared_file_kills_its_token(vfs: LocalVfs, store: LocalVfsStore) -> None:
    await vfs.write("/a.txt", b"a", "", overwrite=False)
    token = token_of(await vfs.share("/a.txt", public=True))
    await vfs.delete(["/a.txt"])
    assert store.public_file(token) is None
    [entry] = await vfs.trashed()
    await vfs.restore(entry.id)
    assert store.public_file(token) is None


async def test_a_file_removed_by_hand_is_not_served(
    vfs: LocalVfs, store: LocalVfsStore, alice_root: Path
) -> None:
    await vfs.write("/a.txt", b"a", "", overwrite=False)
    token = token_of(await vfs.share("/a.txt", public=True))
    (alice_root / "a.txt").unlink()
    assert store.public_file(token) is None


@pytest.mark.parametrize(
    "token", ["", "short", "../../index.sqlite3", "a" * 200, "x" * 32 + ".nothex", "x" * 32]
)
def test_unknown_or_malformed_tokens(store: LocalVfsStore, token: str) -> None:
    assert store.public_file(token) is None


async def test_share_urls_without_a_base_and_with_a_slash(store: LocalVfsStore) -> None:
    bare = store.for_user("did:ixo:erin")
    slashed = store.for_user("did:ixo:erin", public_base_url="http://host:8080/")
    await bare.write("/a.txt", b"a", "", overwrite=False)

    url = await bare.share("/a.txt", public=True)

    assert url is not None
    assert re.fullmatch(r"/vfs/public/[A-Za-z0-9_-]{32}", url)
    assert await slashed.share("/a.txt", public=True) == f"http://host:8080{url}"


async def test_share_errors(vfs: LocalVfs) -> None:
    with pytest.raises(VfsError) as missing:
        await vfs.share("/nothing.txt", public=True)
    assert missing.value.kind == "not_found"
    with pytest.raises(VfsError) as root:
        await vfs.share("/", public=True)
    assert root.value.kind == "invalid_path"


async def test_sharing_a_folder_serves_an_index_of_its_files(
    vfs: LocalVfs, store: LocalVfsStore
) -> None:
    a = await vfs.write("/album/a <b>.txt", b"A", "", overwrite=False)
    b = await vfs.write("/album/sub/b.txt", b"B", "", overwrite=False)
    own = token_of(await vfs.share("/album/sub/b.txt", public=True))
    folder = token_of(await vfs.share("/album", public=True))

    page = store.public_file(folder)

    assert page is not None
    body, mime_type, name = page
    assert (mime_type, name) == ("text/html; charset=utf-8", "album.html")
    links = re.findall(r'href="([^"]+)">([^<]+)<', body.decode())
    assert links == [(f"{folder}.{a.id}", "a &lt;b&gt;.txt"), (f"{folder}.{b.id}", "sub/b.txt")]
    assert store.public_file(f"{folder}.{a.id}") == (b"A", "text/plain", "a <b>.txt")

    await vfs.move("/album/a <b>.txt", "/outside.txt")
    assert store.public_file(f"{folder}.{a.id}") is None
    await vfs.move("/album", "/photos")
    assert store.public_file(f"{folder}.{b.id}") == (b"B", "text/plain", "b.txt")
    assert await vfs.share("/photos", public=True) == f"{BASE_URL}/vfs/public/{folder}"

    assert await vfs.share("/photos", public=False) is None
    assert store.public_file(folder) is None
    assert store.public_file(f"{folder}.{b.id}") is None
    assert store.public_file(own) == (b"B", "text/plain", "b.txt")


async def test_a_folder_token_does_not_open_another_users_files(
    vfs: LocalVfs, bob: LocalVfs, store: LocalVfsStore
) -> None:
    await vfs.write("/pub/a.txt", b"a", "", overwrite=False)
    folder = token_of(await vfs.share("/pub", public=True))
    theirs = await bob.write("/pub/b.txt", b"b", "", overwrite=False)
    assert store.public_file(f"{folder}.{theirs.id}") is None


async def test_deleting_a_shared_folder_kills_its_token(
    vfs: LocalVfs, store: LocalVfsStore
) -> None:
    await vfs.write("/pub/a.txt", b"a", "", overwrite=False)
    folder = token_of(await vfs.share("/pub", public=True))
    await vfs.delete(["/pub"])
    assert store.public_file(folder) is None


async def test_parallel_writes_do_not_corrupt(vfs: LocalVfs) -> None:
    await vfs.write("/shared.txt", b"start", "", overwrite=False)
    await vfs.write(
        "/edited.txt", " ".join(f"m{n}" for n in range(5)).encode(), "", overwrite=False
    )
    bodies = {f"/many/{n}.txt": f"file {n}\n".encode() * 100 for n in range(20)}
    overwrites = [f"overwrite {n}\n".encode() * 100 for n in range(10)]

    created, _, edits = await asyncio.gather(
        asyncio.gather(
            *(vfs.write(path, body, "", overwrite=False) for path, body in bodies.items())
        ),
        asyncio.gather(
            *(vfs.write("/shared.txt", body, "", overwrite=True) for body in overwrites)
        ),
        asyncio.gather(
            *(vfs.edit("/edited.txt", f"m{n}", f"M{n}", replace_all=False) for n in range(5))
        ),
    )

    assert all(isinstance(info, FileInfo) for info in created)
    assert len({info.id for info in created}) == 20
    for path, body in bodies.items():
        assert (await vfs.content(path, 10_000))[0] == body
    assert (await vfs.content("/shared.txt", 10_000))[0] in overwrites
    assert await vfs.versions("/shared.txt") == list(range(1, 11))
    assert edits == [1] * 5
    assert (await vfs.content("/edited.txt", 100))[0] == b"M0 M1 M2 M3 M4"
    assert await vfs.versions("/edited.txt") == [1, 2, 3, 4, 5]
