"""The six Memory Engine tools, in process over the embedded store.

Argument names follow the Memory Engine contract, so prompts and examples written for a
remote engine work unchanged; destructive tools and oracle writes refuse unless their
confirmation flag is ``true``. Results are JSON objects; failures are
``{"ok": false, "error": …}`` and never raise into the graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle_core import PluginTool, RuntimeContext
from oracle_plugins.memory._names import prefixed, tool_effect
from oracle_plugins.memory._scope import scoped_knowledge_level
from oracle_plugins.memory._slots import RECENT_DAYS
from oracle_plugins.memory._store import EmbeddedMemoryStore

__all__ = ["build_embedded_tools"]

CONFIRMED = "true only once the user has explicitly confirmed it."


class SearchArgs(BaseModel):
    """Arguments of ``search_memory_engine``."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=2000)
    # The engine's eight strategies are hints; here only recent_memory changes the ranking.
    strategy: str = Field("balanced", max_length=30, description="recent_memory: newest first")
    knowledge_level: Literal["user", "oracle", "both"] = "both"
    max_results: int = Field(10, ge=1, le=50)


class AddMemoryArgs(BaseModel):
    """Arguments of ``add_memory``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=200, description="A short title.")
    content: str = Field(min_length=1, max_length=20000)


class AddOracleKnowledgeArgs(BaseModel):
    """Arguments of ``add_oracle_knowledge``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=200, description="A short title.")
    content: str = Field(min_length=1, max_length=20000)
    confirmed_insertion_from_user: bool = Field(description=CONFIRMED)
    knowledge_space_type: Literal["public", "private"] = Field(
        "public", description="public: every user; private: the oracle's owners."
    )


class DeleteEpisodeArgs(BaseModel):
    """Arguments of ``delete_episode``."""

    model_config = ConfigDict(extra="forbid")

    episode_uuid: str = Field(max_length=64)
    confirmed_deletion_from_user: bool = Field(description=CONFIRMED)


class DeleteEdgeArgs(BaseModel):
    """Arguments of ``delete_edge``."""

    model_config = ConfigDict(extra="forbid")

    edge_uuid: str = Field(max_length=64, description="A fact's uuid.")
    confirmed_deletion_from_user: bool = Field(description=CONFIRMED)


class ClearArgs(BaseModel):
    """Arguments of ``clear``."""

    model_config = ConfigDict(extra="forbid")

    confirmed_deletion_from_user: bool = Field(description=CONFIRMED)


def _fail(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


def _guarded(wire: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """The handler, turning a store failure into an error object for the agent."""

    async def run(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        try:
            return await handler(args, rt_ctx)
        except Exception as exc:
            # The type only: messages of SQLite errors may quote stored text.
            rt_ctx.logger.error("memory tool %s failed: %s", wire, type(exc).__name__)
            return _fail(f"The memory store failed ({type(exc).__name__}); try again later.")

    return run


NOT_CONFIRMED = "Not done: ask the user to confirm, then call again with the flag set to true."


def build_embedded_tools(
    store: Callable[[], EmbeddedMemoryStore],
    *,
    oracle_did: str | None,
    owners: frozenset[str],
    selected: Sequence[str],
) -> list[PluginTool]:
    """The selected tools (wire names), bound to the store ``store()`` returns.

    Args:
        store: Returns the open store (it opens in the plugin's lifespan).
        oracle_did: Owner of the oracle space (``ORACLE_ENTITY_DID``).
        owners: DIDs allowed to write oracle knowledge and read its private part.
        selected: Wire names to build, in order.
    """

    def owner_space(rt_ctx: RuntimeContext[Any]) -> str | None:
        return oracle_did if oracle_did and rt_ctx.user.did in owners else None

    async def search(args: SearchArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
        recent = args.strategy == "recent_memory"
        since = datetime.now(UTC) - timedelta(days=RECENT_DAYS) if recent else None
        result = await asyncio.to_thread(
            store().search,
            args.query,
            user_did=rt_ctx.user.did,
            oracle_did=oracle_did,
            oracle_owner=owner_space(rt_ctx) is not None,
            knowledge_level=scoped_knowledge_level(args.knowledge_level, rt_ctx.data_scope),
            limit=args.max_results,
            since=since,
            newest_first=recent,
        )
        return result.to_json()

    async def add_memory(args: AddMemoryArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
        episode, facts = await asyncio.to_thread(
            store().add_episode,
            space="user",
            owner=rt_ctx.user.did,
            name=args.name,
            content=args.content,
        )
        return {"ok": True, "episode_uuid": episode, "facts": len(facts)}

    async def add_oracle_knowledge(
        args: AddOracleKnowledgeArgs, rt_ctx: RuntimeContext[Any]
    ) -> dict[str, Any]:
        if args.confirmed_insertion_from_user is not True:
            return _fail(NOT_CONFIRMED)
        space_owner = owner_space(rt_ctx)
        if space_owner is None:
            return _fail("Only the owners of this oracle can add its knowledge.")
        episode, facts = await asyncio.to_thread(
            store().add_episode,
            space="oracle",
            owner=space_owner,
            name=args.name,
            content=args.content,
            visibility=args.knowledge_space_type,
        )
        return {"ok": True, "episode_uuid": episode, "facts": len(facts)}

    async def delete_episode(
        args: DeleteEpisodeArgs, rt_ctx: RuntimeContext[Any]
    ) -> dict[str, Any]:
        if args.confirmed_deletion_from_user is not True:
            return _fail(NOT_CONFIRMED)
        deleted = await asyncio.to_thread(
            store().delete_episode,
            args.episode_uuid,
            user_did=rt_ctx.user.did,
            oracle_owner=owner_space(rt_ctx),
        )
        return {"ok": True} if deleted else _fail("No such memory of yours.")

    async def delete_edge(args: DeleteEdgeArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
        if args.confirmed_deletion_from_user is not True:
            return _fail(NOT_CONFIRMED)
        deleted = await asyncio.to_thread(
            store().delete_fact,
            args.edge_uuid,
            user_did=rt_ctx.user.did,
            oracle_owner=owner_space(rt_ctx),
        )
        return {"ok": True} if deleted else _fail("No such fact of yours.")

    async def clear(args: ClearArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
        if args.confirmed_deletion_from_user is not True:
            return _fail(NOT_CONFIRMED)
        count = await asyncio.to_thread(store().clear_user, rt_ctx.user.did)
        return {"ok": True, "deleted_episodes": count}

    specs: dict[str, tuple[str, type[BaseModel], Callable[..., Any]]] = {
        "search_memory_engine": (
            "Recall what you know about the user and the oracle's shared knowledge.",
            SearchArgs,
            search,
        ),
        "add_memory": (
            "Remember something about the user for future conversations.",
            AddMemoryArgs,
            add_memory,
        ),
        "add_oracle_knowledge": (
            "Add knowledge every user of this oracle can recall (owners only).",
            AddOracleKnowledgeArgs,
            add_oracle_knowledge,
        ),
        "delete_episode": (
            "Forget one memory (its episode_uuid from a search).",
            DeleteEpisodeArgs,
            delete_episode,
        ),
        "delete_edge": (
            "Forget one fact (its uuid from a search).",
            DeleteEdgeArgs,
            delete_edge,
        ),
        "clear": (
            "Erase everything remembered about the user, irreversibly.",
            ClearArgs,
            clear,
        ),
    }
    tools = []
    for wire in selected:
        description, schema, handler = specs[wire]
        tools.append(
            PluginTool(
                name=prefixed(wire),
                description=description,
                args_schema=schema,
                handler=_guarded(wire, handler),
                effect=tool_effect(wire),
            )
        )
    return tools
