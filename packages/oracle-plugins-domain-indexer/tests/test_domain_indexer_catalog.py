"""The optional local catalog: ``DOMAIN_INDEXER_URL=sqlite:///<path>`` answers both tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, reply
from oracle_plugins.domain_indexer import DomainIndexerPlugin, SqliteCardCatalog
from oracle_plugins.domain_indexer.__main__ import main as cli
from oracle_plugins.domain_indexer.testing import load_fixtures

WATER = "did:ixo:entity:1a2b3c4d5e6f708192a3b4c5d6e7f801"
POD = "did:ixo:entity:3c4d5e6f708192a3b4c5d6e7f8091223"


@pytest.fixture
def cards_file(tmp_path: Path) -> Path:
    path = tmp_path / "cards.json"
    path.write_text(json.dumps(load_fixtures()["domain_cards"]))
    return path


@pytest.fixture
def catalog(tmp_path: Path, cards_file: Path) -> Path:
    path = tmp_path / "catalog" / "cards.sqlite"
    assert cli(["import-cards", str(cards_file), "--catalog", str(path)]) == 0
    return path


async def tool_results(catalog: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[ToolMessage]:
    sub = ScriptedChatModel([*(call_tool(name, args) for name, args in calls), reply("done")])
    runtime = await create_test_runtime(
        plugins=[DomainIndexerPlugin()],
        config={"DOMAIN_INDEXER_URL": f"sqlite:///{catalog}"},
        model=sub,
    )
    async with runtime:
        assert await runtime.invoke_sub_agent("call_domain_indexer_agent", "look up") == "done"
    return [m for m in sub.calls[-1].messages if isinstance(m, ToolMessage)]


async def test_search_and_cards_come_from_the_catalog(catalog: Path) -> None:
    search, filtered, card, missing = await tool_results(
        catalog,
        [
            ("domain_indexer_search", {"query": "water", "limit": 2}),
            (
                "domain_indexer_search",
                {"query": "water energy", "filters": {"dc.entity_type": "dao/pod"}},
            ),
            ("get_domain_card", {"did": WATER}),
            ("get_domain_card", {"did": "did:ixo:entity:unknown"}),
        ],
    )
    body = json.loads(str(search.content))
    assert body["source"] == "local-catalog"
    assert body["total"] == 2  # the collective and the pod (its keywords say water pumps)
    assert body["results"][0]["id"] == WATER
    assert body["results"][0]["record"]["summary"].startswith("Funds, builds")
    assert [hit["id"] for hit in json.loads(str(filtered.content))["results"]] == [POD]
    trimmed = json.loads(str(card.content))
    assert (trimmed["name"], trimmed["entity_type"]) == ("Clean Water Collective", ["dao"])
    assert "raw_credential" not in trimmed
    assert json.loads(str(missing.content)) == {"error": "Domain card not found"}


async def test_what_the_catalog_cannot_answer_is_a_tool_error(catalog: Path) -> None:
    scopes, geo = await tool_results(
        catalog,
        [
            ("domain_indexer_search", {"query": "water", "scopes": "events"}),
            ("domain_indexer_search", {"query": "water", "filters": {"dc.bbox": "1,2,3,4"}}),
        ],
    )
    assert scopes.status == "error"
    assert "only answers scope domain_cards" in str(scopes.content)
    assert geo.status == "error"
    assert "cannot filter on dc.bbox" in str(geo.content)


async def test_query_syntax_is_never_interpreted(tmp_path: Path) -> None:
    catalog = SqliteCardCatalog.open(tmp_path / "c.sqlite")
    try:
        catalog.import_cards(load_fixtures()["domain_cards"])

        class Query:
            query = 'water" OR NEAR(x) -'
            limit = 10
            scopes = None
            filters = None

        result = await catalog.search(Query())
        assert result["results"][0]["id"] == WATER
        Query.query = "!!!"
        assert (await catalog.search(Query()))["results"] == []
    finally:
        await catalog.aclose()


def test_import_replaces_cards_and_rejects_cards_without_id(tmp_path: Path) -> None:
    catalog = SqliteCardCatalog.open(tmp_path / "c.sqlite")
    try:
        assert catalog.import_cards([{"id": WATER, "name": "Old"}]) == 1
        assert catalog.import_cards([{"id": WATER, "name": "New"}, {"id": POD}]) == 2
        assert catalog.count() == 2
        with pytest.raises(ValueError, match="card 1 has no string 'id'"):
            catalog.import_cards([{"id": "did:x:1"}, {"name": "nameless"}])
        assert catalog.count() == 2
    finally:
        catalog.close()


def test_the_command_line_reads_arrays_objects_and_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cards.sqlite"
    lines = tmp_path / "cards.jsonl"
    lines.write_text('{"id": "did:x:1", "name": "One"}\n{"id": "did:x:2"}\n')
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"cards": [{"id": "did:x:3"}]}))
    assert cli(["import-cards", str(lines), "--catalog", str(target)]) == 0
    assert cli(["import-cards", str(wrapped), "--catalog", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"imported 1 cards into {target} (3 in the catalog)" in out
    bad = tmp_path / "bad.json"
    bad.write_text('"just a string"')
    assert cli(["import-cards", str(bad), "--catalog", str(target)]) == 1
    assert "expected a JSON array of card objects" in capsys.readouterr().err
