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
