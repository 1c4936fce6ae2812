"""Writing, reading, editing, moving, listing and globbing in the embedded store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oracle_core.testing import tiny_pdf, tiny_png
from oracle_plugins.vfs._backend import FileInfo, Node, VfsBackend, VfsError
from oracle_plugins.vfs._local import LocalVfs, LocalVfsStore


async def test_write_creates_a_real_file(vfs: LocalVfs, alice_root: Path) -> None:
    info = await vfs.write("/notes/today.md", b"# Today\n", "", overwrite=False)

    assert info.path == "/notes/today.md"
    assert len(info.id) == 32
    assert (info.size, info.mime_type, info.version) == (8, "text/markdown", 1)
    assert (alice_root / "notes" / "today.md").read_bytes() == b"# Today\n"


async def test_write_keeps_a_given_mime_type(vfs: LocalVfs) -> None:
    await vfs.write("/data.bin", b"{}", "application/json", overwrite=False)
    assert await vfs.content("/data.bin", 100) == (b"{}", "application/json")


async def test_write_refuses_an_existing_path_unless_overwrite(vfs: LocalVfs) -> None:
    first = await vfs.write("/a.txt", b"one", "", overwrite=False)
    with pytest.raises(VfsError) as caught:
        await vfs.write("/a.txt", b"two", "", overwrite=False)
    assert caught.value.kind == "exists"

    second = await vfs.write("/a.txt", b"two", "", overwrite=True)
    assert (second.id, second.version) == (first.id, 2)
    assert await vfs.content("/a.txt", 100) == (b"two", "text/plain")
    assert await vfs.read_version("/a.txt", 1) == b"one"


async def test_write_where_a_folder_or_a_file_is_in_the_way(vfs: LocalVfs) -> None:
    await vfs.write("/box/inner.txt", b"x", "", overwrite=False)
    await vfs.write("/plain.txt", b"x", "", overwrite=False)
    for path in ("/box", "/plain.txt/child.txt"):
        with pytest.raises(VfsError) as caught:
            await vfs.write(path, b"y", "", overwrite=True)
        assert caught.value.kind == "occupied"


async def test_write_refuses_files_beyond_the_limit(tmp_path: Path) -> None:
    with LocalVfsStore(tmp_path / "small", max_file_bytes=10) as store:
        vfs = store.for_user("did:ixo:carol")
        with pytest.raises(VfsError) as caught:
            await vfs.write("/big.txt", b"x" * 11, "", overwrite=False)
        assert caught.value.kind == "too_large"
        assert await vfs.list("/") == []
        assert (await vfs.write("/ok.txt", b"x" * 10, "", overwrite=False)).size == 10


@pytest.mark.parametrize("path", ["relative.txt", "/a/../b.txt", "/a//b.txt", "/trailing/"])
async def test_every_method_checks_paths(vfs: LocalVfs, path: str) -> None:
    calls = [
        vfs.write(path, b"x", "", overwrite=True),
        vfs.read(path, 1, 10),
        vfs.content(path, 10),
        vfs.edit(path, "a", "b", replace_all=False),
        vfs.move(path, "/ok.txt"),
        vfs.move("/ok.txt", path),
        vfs.delete([path]),
        vfs.share(path, public=True),
        vfs.list(path),
        vfs.search("x", path),
        vfs.grep("x", path),
    ]
    for call in calls:
        with pytest.raises(VfsError) as caught:
            await call
        assert caught.value.kind == "invalid_path"


async def test_read_returns_a_window_of_lines(vfs: LocalVfs) -> None:
    await vfs.write("/five.txt", b"l1\r\nl2\nl3\nl4\nl5\n", "", overwrite=False)

    window = await vfs.read("/five.txt", 2, 2)
    assert (window.text, window.offset, window.count) == ("l2\nl3", 2, 2)
    assert (window.has_more, window.total_lines, window.mime_type) == (True, 5, "text/plain")
    last = await vfs.read("/five.txt", 4, 10)
    assert (last.text, last.count, last.has_more) == ("l4\nl5", 2, False)
    beyond = await vfs.read("/five.txt", 9, 10)
    assert (beyond.text, beyond.count, beyond.has_more, beyond.total_lines) == ("", 0, False, 5)


async def test_read_of_an_empty_file(vfs: LocalVfs) -> None:
    await vfs.write("/empty.txt", b"", "", overwrite=False)
    window = await vfs.read("/empty.txt", 1, 10)
    assert (window.text, window.count, window.total_lines, window.has_more) == ("", 0, 0, False)


async def test_read_of_missing_paths_and_folders(vfs: LocalVfs) -> None:
    await vfs.write("/folder/a.txt", b"x", "", overwrite=False)
    with pytest.raises(VfsError) as missing:
        await vfs.read("/nothing.txt", 1, 10)
    assert missing.value.kind == "not_found"
    with pytest.raises(VfsError) as folder:
        await vfs.read("/folder", 1, 10)
    assert folder.value.kind == "unsupported"


async def test_read_extracts_pdf_text(vfs: LocalVfs) -> None:
    await vfs.write("/report.pdf", tiny_pdf(["Quarterly numbers", "All good"]), "", overwrite=False)
    window = await vfs.read("/report.pdf", 1, 50)
    assert window.mime_type == "application/pdf"
    assert window.text.startswith("[page 1]")
    assert "Quarterly numbers" in window.text
    assert "All good" in window.text


async def test_read_refuses_broken_pdfs_images_and_binaries(vfs: LocalVfs) -> None:
    await vfs.write("/broken.pdf", b"%PDF-1.4 not really", "", overwrite=False)
    await vfs.write("/photo.png", tiny_png(), "", overwrite=False)
    await vfs.write("/blob.dat", bytes(range(256)), "", overwrite=False)
    details = {}
    for path in ("/broken.pdf", "/photo.png", "/blob.dat"):
        with pytest.raises(VfsError) as caught:
            await vfs.read(path, 1, 10)
        assert caught.value.kind == "unsupported"
        details[path] = caught.value.detail
    assert "PDF" in details["/broken.pdf"]
    assert "transcription" in details["/photo.png"]
    assert "binary" in details["/blob.dat"]


async def test_content_returns_bytes_and_type(vfs: LocalVfs, alice_root: Path) -> None:
    await vfs.write("/photo.png", tiny_png(), "", overwrite=False)
    (alice_root / "by-hand.unknownext").write_bytes(b"\x01\x02")

    assert await vfs.content("/photo.png", 10_000) == (tiny_png(), "image/png")
    assert await vfs.content("/by-hand.unknownext", 10) == (b"\x01\x02", "application/octet-stream")
    with pytest.raises(VfsError) as too_large:
        await vfs.content("/photo.png", 10)
    assert too_large.value.kind == "too_large"
    with pytest.raises(VfsError) as missing:
        await vfs.content("/nope.png", 10)
    assert missing.value.kind == "not_found"


async def test_edit_replaces_exact_strings_and_keeps_versions(vfs: LocalVfs) -> None:
    await vfs.write("/doc.txt", b"alpha beta beta\n", "", overwrite=False)

    assert await vfs.edit("/doc.txt", "alpha", "ALPHA", replace_all=False) == 1
    with pytest.raises(VfsError) as not_unique:
        await vfs.edit("/doc.txt", "beta", "B", replace_all=False)
    assert not_unique.value.kind == "not_unique"
    assert "2 times" in not_unique.value.detail
    assert await vfs.edit("/doc.txt", "beta", "B", replace_all=True) == 2
    with pytest.raises(VfsError) as no_match:
        await vfs.edit("/doc.txt", "gamma", "G", replace_all=True)
    assert no_match.value.kind == "no_match"

    assert (await vfs.content("/doc.txt", 100))[0] == b"ALPHA B B\n"
    assert await vfs.versions("/doc.txt") == [1, 2]
    assert await vfs.read_version("/doc.txt", 2) == b"ALPHA beta beta\n"


async def test_edit_keeps_a_byte_order_mark(vfs: LocalVfs) -> None:
    await vfs.write("/bom.txt", b"\xef\xbb\xbfhello", "", overwrite=False)
    await vfs.edit("/bom.txt", "hello", "bye", replace_all=False)
    assert (await vfs.content("/bom.txt", 100))[0] == b"\xef\xbb\xbfbye"


async def test_edit_refuses_binary_and_missing_files(vfs: LocalVfs) -> None:
    await vfs.write("/blob.dat", b"\x00\x01abc", "", overwrite=False)
    with pytest.raises(VfsError) as binary:
        await vfs.edit("/blob.dat", "abc", "x", replace_all=False)
    assert binary.value.kind == "unsupported"
    with pytest.raises(VfsError) as missing:
        await vfs.edit("/nope.txt", "abc", "x", replace_all=False)
    assert missing.value.kind == "not_found"


async def test_move_a_file_keeps_its_id_and_versions(vfs: LocalVfs, alice_root: Path) -> None:
    first = await vfs.write("/a.txt", b"one", "", overwrite=False)
    await vfs.write("/a.txt", b"two", "", overwrite=True)

    moved = await vfs.move("/a.txt", "/archive/2024/b.txt")

    assert moved == FileInfo("/archive/2024/b.txt", first.id, 3, "text/plain", 2)
    assert not (alice_root / "a.txt").exists()
    assert (alice_root / "archive" / "2024" / "b.txt").read_bytes() == b"two"
    assert await vfs.versions("/archive/2024/b.txt") == [1]
    assert await vfs.move("/archive/2024/b.txt", "/archive/2024/b.txt") == moved


async def test_move_a_folder_moves_everything_under_it(vfs: LocalVfs) -> None:
    one = await vfs.write("/projects/x/one.md", b"1", "", overwrite=False)
    two = await vfs.write("/projects/two.md", b"2", "", overwrite=False)

    assert await vfs.move("/projects", "/done") == Node("/done", "folder")

    assert await vfs.glob("**") == ["/done/two.md", "/done/x/one.md"]
    ids = {node.path: node.id for node in await vfs.list("/done")}
    assert ids["/done/two.md"] == two.id
    assert {node.id for node in await vfs.list("/done/x")} == {one.id}
    with pytest.raises(VfsError) as gone:
        await vfs.list("/projects")
    assert gone.value.kind == "not_found"


async def test_move_errors(vfs: LocalVfs) -> None:
    await vfs.write("/a.txt", b"a", "", overwrite=False)
    await vfs.write("/b.txt", b"b", "", overwrite=False)
    await vfs.write("/dir/c.txt", b"c", "", overwrite=False)
    cases = [
        ("/a.txt", "/b.txt", "occupied"),
        ("/a.txt", "/dir", "occupied"),
        ("/missing.txt", "/z.txt", "not_found"),
        ("/dir", "/dir/inside", "invalid_path"),
        ("/a.txt", "/b.txt/under", "occupied"),
    ]
    for source, destination, kind in cases:
        with pytest.raises(VfsError) as caught:
            await vfs.move(source, destination)
        assert caught.value.kind == kind, (source, destination)
    assert (await vfs.content("/b.txt", 10))[0] == b"b"


async def test_list_gives_direct_children_folders_first(vfs: LocalVfs) -> None:
    assert await vfs.list("/") == []
    await vfs.write("/b.txt", b"bb", "", overwrite=False)
    await vfs.write("/a.md", b"a", "", overwrite=False)
    await vfs.write("/z/deep/file.txt", b"x", "", overwrite=False)

    nodes = await vfs.list("/")

    assert [(node.path, node.kind) for node in nodes] == [
        ("/z", "folder"),
        ("/a.md", "file"),
        ("/b.txt", "file"),
    ]
    assert (nodes[2].size, nodes[2].mime_type) == (2, "text/plain")
    assert nodes[0].id is None
    assert [node.path for node in await vfs.list("/z")] == ["/z/deep"]


async def test_list_errors(vfs: LocalVfs) -> None:
    await vfs.write("/file.txt", b"x", "", overwrite=False)
    with pytest.raises(VfsError) as missing:
        await vfs.list("/nowhere")
    assert missing.value.kind == "not_found"
    with pytest.raises(VfsError) as file:
        await vfs.list("/file.txt")
    assert file.value.kind == "unsupported"


async def test_list_gives_ids_to_files_made_by_hand(vfs: LocalVfs, alice_root: Path) -> None:
    (alice_root / "by-hand.txt").write_text("hi")
    [node] = await vfs.list("/")
    assert node.path == "/by-hand.txt"
    assert node.id is not None
    assert (await vfs.list("/"))[0].id == node.id


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("/notes/*.md", ["/notes/a.md", "/notes/b.md"]),
        ("**/*.pdf", ["/docs/deep/r.pdf", "/top.pdf"]),
        ("/notes/**", ["/notes/a.md", "/notes/b.md", "/notes/sub/c.md"]),
        ("/notes/**/*.md", ["/notes/a.md", "/notes/b.md", "/notes/sub/c.md"]),
        ("*.pdf", ["/top.pdf"]),
        ("/notes/?.md", ["/notes/a.md", "/notes/b.md"]),
        ("/notes/a.md", ["/notes/a.md"]),
        ("/missing/*", []),
        ("/../*", []),
        ("/notes/[ab].md", []),
    ],
)
async def test_glob(vfs: LocalVfs, pattern: str, expected: list[str]) -> None:
    for path in ("/notes/a.md", "/notes/b.md", "/notes/sub/c.md", "/top.pdf", "/docs/deep/r.pdf"):
        await vfs.write(path, b"x", "", overwrite=False)
    assert await vfs.glob(pattern) == expected


async def test_internal_areas_stay_out_of_sight(vfs: LocalVfs, store: LocalVfsStore) -> None:
    await vfs.write("/keep.txt", b"1", "", overwrite=False)
    await vfs.write("/keep.txt", b"2", "", overwrite=True)
    await vfs.write("/gone.txt", b"x", "", overwrite=False)
    await vfs.delete(["/gone.txt"])
    # Names the store uses inside are ordinary names for the user.
    for name in ("/.trash", "/trash", "/versions", "/index.sqlite3", "/staging"):
        await vfs.write(name, b"mine", "", overwrite=False)

    listed = [node.path for node in await vfs.list("/")]
    assert listed == sorted(
        ["/.trash", "/index.sqlite3", "/keep.txt", "/staging", "/trash", "/versions"]
    )
    assert await vfs.glob("**") == listed
    assert (await vfs.content("/index.sqlite3", 10))[0] == b"mine"
    assert (store.root / "index.sqlite3").read_bytes().startswith(b"SQLite format 3")


async def test_links_leading_out_of_the_user_folder(
    vfs: LocalVfs, bob: LocalVfs, store: LocalVfsStore, alice_root: Path
) -> None:
    await bob.write("/secret.txt", b"bob's", "", overwrite=False)
    bob_root = next(p for p in (store.root / "users").iterdir() if p / "files" != alice_root)
    os.symlink(bob_root / "files", alice_root / "peek")
    os.symlink(bob_root / "files" / "secret.txt", alice_root / "secret.txt")

    for path in ("/peek/secret.txt", "/secret.txt"):
        with pytest.raises(VfsError) as caught:
            await vfs.read(path, 1, 10)
        assert caught.value.kind == "denied"
    assert await vfs.list("/") == []
    assert await vfs.glob("**") == []
    assert await vfs.grep("bob", "/") == []


async def test_satisfies_the_backend_protocol(vfs: LocalVfs) -> None:
    backend: VfsBackend = vfs
    info = await backend.write("/p.txt", b"protocol", "", overwrite=False)
    assert (await backend.read("/p.txt", 1, 1)).text == "protocol"
    assert info.version == 1


async def test_data_survives_reopening(tmp_path: Path) -> None:
    with LocalVfsStore(tmp_path / "vfs") as store:
        info = await store.for_user("did:ixo:dan").write("/a.txt", b"x", "", overwrite=False)
    with LocalVfsStore(tmp_path / "vfs") as store:
        [node] = await store.for_user("did:ixo:dan").list("/")
    assert node.id == info.id


async def test_a_closed_store_is_unavailable(store: LocalVfsStore, vfs: LocalVfs) -> None:
    store.close()
    store.close()
    with pytest.raises(VfsError) as caught:
        await vfs.list("/")
    assert caught.value.kind == "unavailable"
