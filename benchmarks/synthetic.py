"""Synthetic plugins with manifests and tools of realistic size, for the benchmarks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool

_TOPICS = [
    "invoices",
    "calendar",
    "tickets",
    "inventory",
    "payroll",
    "shipping",
    "contracts",
    "surveys",
    "leads",
    "assets",
    "permits",
    "grants",
    "claims",
    "sensors",
    "audits",
    "recipes",
    "travel",
    "courses",
    "donations",
    "events",
]


class QueryArgs(BaseModel):
    """Arguments of a synthetic search tool."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="Free-text search terms.")
    limit: int = Field(10, ge=1, le=50, description="Maximum number of results.")
    status: Literal["open", "closed", "any"] = Field("any", description="Filter by status.")


class RecordArgs(BaseModel):
    """Arguments of a synthetic lookup tool."""

    model_config = ConfigDict(extra="forbid")

    record_id: str = Field(description="Identifier of the record, as returned by search.")
    include_history: bool = Field(False, description="Also return the change history.")


def synthetic_plugin(index: int, visibility: Literal["always", "on-demand"]) -> OraclePlugin:
    """Plugin ``synthetic-<index>`` with two tools and a full manifest."""
    topic = _TOPICS[index % len(_TOPICS)]
    name = f"synthetic-{index}"
    slug = name.replace("-", "_")
    manifest = {
        "title": f"{topic.title()} Desk {index}",
        "summary": f"Search and read {topic} records of the organisation, with their history.",
        "when_to_use": [
            f"The user asks about {topic} or wants to find a specific one",
            f"The user needs the details or history of a {topic[:-1]} record",
        ],
        "when_not_to_use": [f"Creating or deleting {topic}"],
        "examples": [
            {
                "user": f"Find open {topic} about the north site",
                "tool": f"{slug}_search",
                "args": {"query": "north site", "status": "open"},
            }
        ],
        "tags": [topic, "records", "search"],
        "category": "data",
        "visibility": visibility,
        "stability": "stable",
    }

    def get_tools(ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(
            name=f"{slug}_search",
            description=f"Search {topic} records by free text; returns ids and titles.",
            args_schema=QueryArgs,
            effect="read",
        )
        def search(args: QueryArgs, rt_ctx: RuntimeContext[Any]) -> list[dict[str, str]]:
            return [{"id": f"{topic}-1", "title": f"{args.query} ({topic})"}]

        @plugin_tool(
            name=f"{slug}_get",
            description=f"Read one {topic[:-1]} record by id, optionally with its history.",
            args_schema=RecordArgs,
            effect="read",
        )
        def get(args: RecordArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, str]:
            return {"id": args.record_id, "topic": topic}

        return [search, get]

    from oracle_core import define_oracle_plugin

    return define_oracle_plugin(name=name, version="1.0.0", manifest=manifest, get_tools=get_tools)


def synthetic_plugins(always: int, on_demand: int, start: int = 0) -> list[OraclePlugin]:
    """``always`` always-visible then ``on_demand`` on-demand synthetic plugins."""
    plugins = [synthetic_plugin(start + i, "always") for i in range(always)]
    plugins += [synthetic_plugin(start + always + i, "on-demand") for i in range(on_demand)]
    return plugins
