"""The path rules of 03-plugins §17.3 (``check_path``, ``parent_of``)."""

from __future__ import annotations

import pytest

from oracle_plugins.vfs._backend import VfsError
from oracle_plugins.vfs._paths import MAX_PATH, check_path, parent_of


@pytest.mark.parametrize(
    "path",
    [
        "/a",
        "/notes/today.md",
        "/with space/and-dash_underscore",
        "/.hidden",
        "/a/...",
        "/ünïcödé/日本.txt",
        "/" + "a" * (MAX_PATH - 1),
    ],
)
def test_valid_paths_pass_unchanged(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "absolute"),
        ("notes/a.md", "absolute"),
        ("/", "end with '/'"),
        ("/notes/", "end with '/'"),
        ("/a//b", "'//'"),
        ("/a/./b", "'.' or '..'"),
        ("/a/../b", "'.' or '..'"),
        ("/..", "'.' or '..'"),
        ("/a\x00b", "NUL"),
        ("/" + "a" * MAX_PATH, "1024"),
    ],
)
def test_invalid_paths_are_refused_with_the_rule(path: str, reason: str) -> None:
    with pytest.raises(VfsError) as caught:
        check_path(path)
    assert caught.value.kind == "invalid_path"
    assert reason in caught.value.detail


def test_root_only_where_admitted() -> None:
    assert check_path("/", root_ok=True) == "/"
    with pytest.raises(VfsError, match="'//'"):
        check_path("//", root_ok=True)


@pytest.mark.parametrize(("path", "parent"), [("/a", "/"), ("/a/b", "/a"), ("/a/b/c.md", "/a/b")])
def test_parent_of(path: str, parent: str) -> None:
    assert parent_of(path) == parent
