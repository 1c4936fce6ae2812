"""FTS5 search and exact grep in the embedded store, including files edited by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oracle_core.testing import tiny_png
from oracle_plugins.vfs._backend import GrepMatch, VfsError
from oracle_plugins.vfs._local import GREP_LIMIT, LocalVfs


def _lines(count: int, marks: dict[int, str]) -> bytes:
    return "".join(f"{marks.get(n, f'filler line {n}')}\n" for n in range(1, count + 1)).encode()


def hand_edit(path: Path, text: str) -> None:
    """Rewrite ``path`` in place as an editor would, with a later mtime."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 5_000_000_000, before + 5_000_000_000))


async def test_search_cites_the_lines_that_match(vfs: LocalVfs) -> None:
    await vfs.write(
        "/notes/long.md",
        _lines(45, {3: "the zebra sleeps", 25: "a zebra runs"}),
        "",
        overwrite=False,
    )
    await vfs.write("/notes/other.md", b"nothing here\n", "", overwrite=False)

    result = await vfs.search("zebra")

    assert result.semantic is False
    [hit] = result.hits
    assert hit.path == "/notes/long.md"
    assert hit.lines == ((3, 3), (25, 25))
    assert hit.snippet == "the zebra sleeps"
    assert isinstance(hit.score, float)


async def test_search_ranks_and_scopes(vfs: LocalVfs) -> None:
    await vfs.write("/a/many.txt", b"budget budget budget plan\n", "", overwrite=False)
    await vfs.write(
        "/a/once.txt", b"budget and a great many other words to dilute it\n", "", overwrite=False
    )
    await vfs.write("/b/elsewhere.txt", b"budget\n", "", overwrite=False)

    everywhere = await vfs.search("budget")
    under_a = await vfs.search("budget", "/a")
    one_file = await vfs.search("budget", "/b/elsewhere.txt")

    assert {hit.path for hit in everywhere.hits} == {
        "/a/many.txt",
        "/a/once.txt",
        "/b/elsewhere.txt",
    }
    assert [hit.path for hit in under_a.hits] == ["/a/many.txt", "/a/once.txt"]
    assert [hit.path for hit in one_file.hits] == ["/b/elsewhere.txt"]


async def test_search_wants_all_words_then_any(vfs: LocalVfs) -> None:
    await vfs.write("/both.txt", b"invoice for march\n", "", overwrite=False)
    await vfs.write("/one.txt", b"march only\n", "", overwrite=False)

    assert [hit.path for hit in (await vfs.search("invoice march")).hits] == ["/both.txt"]
    fallback = await vfs.search("march holidays")
    assert {hit.path for hit in fallback.hits} == {"/both.txt", "/one.txt"}


async def test_search_stems_and_folds_accents(vfs: LocalVfs) -> None:
    await vfs.write("/menu.txt", b"first line\nthe cafe was running late\n", "", overwrite=False)

    accented = await vfs.search("Café")
    stemmed = await vfs.search("runs")

    assert [hit.lines for hit in accented.hits] == [((2, 2),)]
    assert [hit.path for hit in stemmed.hits] == ["/menu.txt"]
    assert stemmed.hits[0].lines == ((1, 2),)  # a stemmed match cites its whole chunk


DOC = ["/doc.txt"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('"', []),
        ('"unbalanced quote', []),
        ("*", []),
        ("prefix*", DOC),
        ("NEAR(alpha beta)", DOC),
        ("alpha AND", DOC),
        ("OR", DOC),
        ("NOT", DOC),
        ("-alpha", DOC),
        ("^alpha", DOC),
        ("body:alpha", DOC),
        ("alpha + beta", DOC),
        ("(alpha", DOC),
        ("{alpha}", DOC),
        ("🙂", []),
        ("a" * 512, []),
        ("", []),
        ("   ", []),
    ],
)
async def test_awkward_queries_never_raise(vfs: LocalVfs, query: str, expected: list[str]) -> None:
    await vfs.write("/doc.txt", b"alpha beta NEAR prefix OR NOT body\n", "", overwrite=False)
    await vfs.write("/other.txt", b"unrelated words\n", "", overwrite=False)
    result = await vfs.search(query)
    assert result.semantic is False
    assert [hit.path for hit in result.hits] == expected


async def test_operator_words_are_searched_as_words(vfs: LocalVfs) -> None:
    await vfs.write("/ops.txt", b"plain\nuse NEAR here\n", "", overwrite=False)
    await vfs.write("/plain.txt", b"plain\n", "", overwrite=False)
    [hit] = (await vfs.search("NEAR")).hits
    assert (hit.path, hit.lines) == ("/ops.txt", ((2, 2),))
    assert (await vfs.search('"quoted NEAR"')).hits[0].path == "/ops.txt"


async def test_search_unicode(vfs: LocalVfs) -> None:
    await vfs.write("/jp.txt", "前置き\n日本語 の テキスト\n".encode(), "", overwrite=False)
    await vfs.write("/ru.txt", "Привет мир\n".encode(), "", overwrite=False)
    [hit] = (await vfs.search("日本語")).hits
    assert (hit.path, hit.lines) == ("/jp.txt", ((2, 2),))
    assert [hit.path for hit in (await vfs.search("ПРИВЕТ")).hits] == ["/ru.txt"]


async def test_search_skips_binary_and_trashed_files(vfs: LocalVfs) -> None:
    await vfs.write("/photo.png", tiny_png(), "", overwrite=False)
    await vfs.write("/trashed.txt", b"needle\n", "", overwrite=False)
    assert [hit.path for hit in (await vfs.search("needle")).hits] == ["/trashed.txt"]
    await vfs.delete(["/trashed.txt"])
    assert (await vfs.search("needle")).hits == ()
    assert (await vfs.search("IHDR")).hits == ()


async def test_search_follows_moves(vfs: LocalVfs) -> None:
    await vfs.write("/old/place.txt", b"needle\n", "", overwrite=False)
    await vfs.search("needle")
    await vfs.move("/old", "/new")
    assert [hit.path for hit in (await vfs.search("needle")).hits] == ["/new/place.txt"]


async def test_search_reindexes_hand_edits(vfs: LocalVfs, alice_root: Path) -> None:
    await vfs.write("/edited.txt", b"stale words\n", "", overwrite=False)
    assert [hit.path for hit in (await vfs.search("stale")).hits] == ["/edited.txt"]

    hand_edit(alice_root / "edited.txt", "fresh content\nand more\n")

    assert (await vfs.search("stale")).hits == ()
    [hit] = (await vfs.search("fresh")).hits
    assert (hit.path, hit.lines) == ("/edited.txt", ((1, 1),))


async def test_search_sees_files_added_and_removed_by_hand(vfs: LocalVfs, alice_root: Path) -> None:
    await vfs.write("/kept.txt", b"needle\n", "", overwrite=False)
    (alice_root / "sub").mkdir()
    (alice_root / "sub" / "added.md").write_text("a needle by hand\n")
    assert {hit.path for hit in (await vfs.search("needle")).hits} == {"/kept.txt", "/sub/added.md"}

    (alice_root / "kept.txt").unlink()

    assert [hit.path for hit in (await vfs.search("needle")).hits] == ["/sub/added.md"]
    info = await vfs.write("/kept.txt", b"again\n", "", overwrite=False)
    assert info.version == 1


async def test_search_of_a_missing_scope(vfs: LocalVfs) -> None:
    with pytest.raises(VfsError) as caught:
        await vfs.search("x", "/nowhere")
    assert caught.value.kind == "not_found"


async def test_grep_finds_exact_lines(vfs: LocalVfs) -> None:
    await vfs.write(
        "/a/one.txt", b"TODO: buy milk\ntodo lower\nnothing\nTODO again\n", "", overwrite=False
    )
    await vfs.write("/b/two.txt", b"a TODO here\n", "", overwrite=False)
    await vfs.write("/a/blob.bin", b"\x00TODO", "", overwrite=False)

    assert await vfs.grep("TODO") == [
        GrepMatch("/a/one.txt", 1, "TODO: buy milk"),
        GrepMatch("/a/one.txt", 4, "TODO again"),
        GrepMatch("/b/two.txt", 1, "a TODO here"),
    ]
    assert [match.path for match in await vfs.grep("TODO", "/b")] == ["/b/two.txt"]
    assert await vfs.grep('"(*') == []


async def test_grep_is_capped(vfs: LocalVfs) -> None:
    await vfs.write("/many.txt", b"hit\n" * (GREP_LIMIT + 50), "", overwrite=False)
    matches = await vfs.grep("hit")
    assert len(matches) == GREP_LIMIT
    assert matches[-1].line == GREP_LIMIT


async def test_grep_reads_hand_edits_at_once(vfs: LocalVfs, alice_root: Path) -> None:
    await vfs.write("/x.txt", b"before\n", "", overwrite=False)
    hand_edit(alice_root / "x.txt", "after\n")
    assert await vfs.grep("before") == []
    assert await vfs.grep("after") == [GrepMatch("/x.txt", 1, "after")]


async def test_grep_of_a_missing_scope(vfs: LocalVfs) -> None:
    with pytest.raises(VfsError) as caught:
        await vfs.grep("x", "/nowhere")
    assert caught.value.kind == "not_found"
