"""``python -m oracle_plugins.domain_indexer import-cards CARDS.json --catalog PATH``.

Fills the local catalog that ``DOMAIN_INDEXER_URL=sqlite:///PATH`` selects. The file holds
a JSON array of domain cards, an object with a ``cards`` array, or one card per line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oracle_plugins.domain_indexer._catalog import SqliteCardCatalog


def read_cards(path: Path) -> list[dict[str, Any]]:
    """Cards from a JSON array, a ``{"cards": [...]}`` object or JSON lines.

    Raises:
        ValueError: The file is none of these, or an entry is not an object.
    """
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data.get("cards", [data] if "id" in data else None)
    if not isinstance(data, list) or not all(isinstance(card, dict) for card in data):
        raise ValueError(f"{path}: expected a JSON array of card objects")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m oracle_plugins.domain_indexer")
    commands = parser.add_subparsers(dest="command", required=True)
    load = commands.add_parser("import-cards", help="import domain cards into a local catalog")
    load.add_argument("cards", type=Path, help="JSON file of domain cards")
    load.add_argument("--catalog", type=Path, required=True, help="SQLite file to fill")
    args = parser.parse_args(argv)
    try:
        cards = read_cards(args.cards)
        catalog = SqliteCardCatalog.open(args.catalog)
        try:
            imported = catalog.import_cards(cards)
            total = catalog.count()
        finally:
            catalog.close()
    except (OSError, ValueError) as exc:
        print(f"import-cards: {exc}", file=sys.stderr)
        return 1
    print(f"imported {imported} cards into {args.catalog} ({total} in the catalog)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
