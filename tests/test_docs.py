"""The docs: every relative link resolves, and every package has its page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _markdown_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted(ROOT.glob("packages/*/README.md")) + sorted(ROOT.glob("apps/*/README.md"))
    return files


def test_relative_links_resolve() -> None:
    broken = []
    for page in _markdown_files():
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_every_package_has_a_docs_page() -> None:
    packages = sorted(
        p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists()
    )
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    missing = [name for name in packages if name not in pages]
    assert missing == []


def test_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```", 2)[1]
    assert "make run" in first_block
    assert "make test" in first_block


def test_the_readme_lists_every_package() -> None:
    text = (ROOT / "README.md").read_text()
    table = text.split("## What is here", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `((?:packages|apps)/[^`]+)` \|", table, re.MULTILINE))
    distributions = {
        str(p.parent.relative_to(ROOT))
        for p in [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("apps/*/pyproject.toml")]
    }
    assert listed == distributions


SERVER_SRC = ROOT / "packages/oracle-server/src/oracle_server"


def _server_map() -> dict[str, str]:
    text = (ROOT / "docs/oracle-server.md").read_text()
    table = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+) \|$", table, re.MULTILINE)
    return dict(rows[2:])


def test_the_server_map_names_paths_that_exist() -> None:
    missing = []
    for where in _server_map().values():
        for path in re.findall(r"`([^`]+)`", where):
            if "/" not in path and not path.endswith(".py"):
                continue
            root = ROOT if path.startswith("packages/") else SERVER_SRC
            if not (root / path).exists():
                missing.append(path)
    assert missing == []


def test_the_server_map_answers_the_newcomers_questions_with_one_path() -> None:
    rows = _server_map()
    for question in (
        "the capability gate",
        "an SSE turn streamed",
        "a UCAN chain validated",
    ):
        [where] = [w for q, w in rows.items() if q.startswith(question)]
        assert len(re.findall(r"`([^`]+)`", where)) == 1, where
