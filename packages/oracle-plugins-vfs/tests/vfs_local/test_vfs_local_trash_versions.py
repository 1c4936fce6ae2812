"""The trash (recoverable deletes) and the capped versions of the embedded store."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle_plugins.vfs._backend import DeleteResult, FileInfo, Node, VfsError
from oracle_plugins.vfs._local import MAX_VERSIONS, LocalVfs, LocalVfsStore


async def test_delete_moves_files_to_the_trash(
    vfs: LocalVfs, store: LocalVfsStore, alice_root: Path
) -> None:
    info = await vfs.write("/old.txt", b"bye", "", overwrite=False)

    assert await vfs.delete(["/old.txt", "/never.txt"]) == [
        DeleteResult("/old.txt", "trashed"),
        DeleteResult("/never.txt", "missing"),
    ]

    assert not (alice_root / "old.txt").exists()
    with pytest.raises(VfsError) as caught:
        await vfs.read("/old.txt", 1, 10)
    assert caught.value.kind == "not_found"
    [entry] = await vfs.trashed()
    assert (entry.path, entry.kind) == ("/old.txt", "file")
    assert entry.trashed_at.startswith("20")
    kept = alice_root.parent / "trash" / entry.id
    assert kept.read_bytes() == b"bye"
    assert await vfs.glob("**") == []
    restored = await vfs.restore(entry.id)
    assert restored == FileInfo("/old.txt", info.id, 3, "text/plain", 1)
    assert await vfs.trashed() == []


async def test_deleting_a_folder_trashes_its_contents(vfs: LocalVfs) -> None:
    await vfs.write("/proj/a.txt", b"needle", "", overwrite=False)
    await vfs.write("/proj/sub/b.txt", b"needle", "", overwrite=False)
    await vfs.write("/keep.txt", b"needle", "", overwrite=False)

    assert await vfs.delete(["/proj", "/proj/a.txt"]) == [
        DeleteResult("/proj", "trashed"),
        DeleteResult("/proj/a.txt", "missing"),
    ]

    assert await vfs.glob("**") == ["/keep.txt"]
    assert [node.path for node in await vfs.list("/")] == ["/keep.txt"]
    assert [hit.path for hit in (await vfs.search("needle")).hits] == ["/keep.txt"]
    assert [match.path for match in await vfs.grep("needle")] == ["/keep.txt"]
    [entry] = await vfs.trashed()
    assert (entry.path, entry.kind) == ("/proj", "folder")
    assert await vfs.restore(entry.id) == Node("/proj", "folder")
    assert await vfs.glob("/proj/**") == ["/proj/a.txt", "/proj/sub/b.txt"]


async def test_an_invalid_path_trashes_nothing(vfs: LocalVfs) -> None:
    await vfs.write("/a.txt", b"a", "", overwrite=False)
    with pytest.raises(VfsError) as caught:
        await vfs.delete(["/a.txt", "/bad/../path"])
    assert caught.value.kind == "invalid_path"
    assert await vfs.glob("**") == ["/a.txt"]


async def test_restore_errors(vfs: LocalVfs, bob: LocalVfs) -> None:
    await vfs.write("/a.txt", b"first", "", overwrite=False)
    await vfs.delete(["/a.txt"])
    second = await vfs.write("/a.txt", b"second", "", overwrite=False)
    [entry] = await vfs.trashed()

    with pytest.raises(VfsError) as occupied:
        await vfs.restore(entry.id)
    assert occupied.value.kind == "occupied"
    with pytest.raises(VfsError) as unknown:
        await vfs.restore("0" * 32)
    assert unknown.value.kind == "not_found"
    with pytest.raises(VfsError) as foreign:
        await bob.restore(entry.id)
    assert foreign.value.kind == "not_found"

    assert second.version == 1
    await vfs.move("/a.txt", "/b.txt")
    restored = await vfs.restore(entry.id)
    assert isinstance(restored, FileInfo)
    assert restored.id != second.id
    assert (await vfs.content("/a.txt", 100))[0] == b"first"


async def test_versions_are_capped_at_fifty(vfs: LocalVfs, alice_root: Path) -> None:
    info = await vfs.write("/log.txt", b"content 1", "", overwrite=False)
    for number in range(2, 62):
        info = await vfs.write("/log.txt", f"content {number}".encode(), "", overwrite=True)

    kept = await vfs.versions("/log.txt")

    assert info.version == 61
    assert len(kept) == MAX_VERSIONS
    assert kept == list(range(11, 61))
    assert await vfs.read_version("/log.txt", 11) == b"content 11"
    assert await vfs.read_version("/log.txt", 60) == b"content 60"
    with pytest.raises(VfsError) as pruned:
        await vfs.read_version("/log.txt", 10)
    assert pruned.value.kind == "not_found"
    assert len(list((alice_root.parent / "versions" / info.id).iterdir())) == MAX_VERSIONS
    assert (await vfs.content("/log.txt", 100))[0] == b"content 61"


async def test_versions_of_a_file_the_store_never_wrote(vfs: LocalVfs, alice_root: Path) -> None:
    (alice_root / "by-hand.txt").write_text("original")
    assert await vfs.versions("/by-hand.txt") == []
    info = await vfs.write("/by-hand.txt", b"replaced", "", overwrite=True)
    assert info.version == 2
    assert await vfs.read_version("/by-hand.txt", 1) == b"original"
    with pytest.raises(VfsError) as missing:
        await vfs.versions("/nothing.txt")
    assert missing.value.kind == "not_found"


async def test_a_file_removed_by_hand_starts_afresh(vfs: LocalVfs, alice_root: Path) -> None:
    first = await vfs.write("/a.txt", b"1", "", overwrite=False)
    await vfs.write("/a.txt", b"2", "", overwrite=True)
    (alice_root / "a.txt").unlink()

    again = await vfs.write("/a.txt", b"3", "", overwrite=False)

    assert again.id != first.id
    assert again.version == 1
    assert await vfs.versions("/a.txt") == []
