"""The ``user-preferences`` plugin: how the user wants the oracle to behave, per user."""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginTool,
    RouteError,
    RuntimeContext,
    route_context,
)
from oracle_plugins.user_preferences._record import (
    SetUserPreferencesArgs,
    merge_record,
    state_view,
)
from oracle_plugins.user_preferences._stores import (
    CACHE_SECONDS,
    PreferencesStore,
    RoomCache,
    open_store,
)

__all__ = ["ROUTE_PATH", "TOOL_NAME", "UserPreferencesPlugin"]

TOOL_NAME = "set_user_preferences"
ROUTE_PATH = "/user-preferences"

TOOL_DESCRIPTION = (
    "Save how the user wants you to behave from their next message on. Pass only the "
    "fields that change; an empty string clears one."
)
_ERROR = "[Error updating user preferences: {}]"
_MAX_REASON = 200


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:_MAX_REASON]


class UserPreferencesPlugin(OraclePlugin):
    """Stores the user's preferences for the oracle and applies them to every turn.

    - Tool ``set_user_preferences`` (bound when the user has somewhere to store them).
    - ``state.user_preferences``, read before each turn, which the core prompt renders as
      its "User Preferences" section; the core prompt also puts its ``agent_name`` in
      place of the oracle's name in the identity line.
    - Route ``GET /user-preferences``: the caller's stored record, or ``null``.

    Storage: the ``ixo.room.state`` / ``user_prefs`` state event of the user's room with
    the oracle; with ``ORACLE_BACKEND=local``, a SQLite table under
    ``SQLITE_DATABASE_PATH``.

    Args:
        cache_seconds: How long a room's preferences are served from memory.
    """

    name = "user-preferences"
    version = "0.1.0"
    manifest = {
        "title": "User Preferences",
        "summary": (
            "Remember how the user wants you to behave: your name, language, tone, "
            "formality and standing instructions."
        ),
        "when_to_use": [
            "The user asks you to use another name, language, tone or formality from now on",
            "The user gives an instruction for all your future replies",
        ],
        "when_not_to_use": ["Facts about the user, or a one-off formatting request"],
        "examples": [
            {
                "user": "From now on call yourself Nova and answer in Portuguese",
                "tool": TOOL_NAME,
                "args": {"agentName": "Nova", "language": "pt"},
            }
        ],
        "tags": ["preferences", "personalisation"],
        "category": "core",
        "visibility": "always",
        "stability": "stable",
    }

    def __init__(self, *, cache_seconds: float = CACHE_SECONDS) -> None:
        self._cache = RoomCache(cache_seconds)
        # Writes to one record are serialised (read, merge, write); one lock per record
        # and event loop, dropped once nobody holds it.
        self._locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._tool = PluginTool(
            name=TOOL_NAME,
            description=TOOL_DESCRIPTION,
            args_schema=SetUserPreferencesArgs,
            handler=self._set_preferences,
            effect="write",
        )

    # --- stores ---------------------------------------------------------------------

    async def _store(self, rt_ctx: RuntimeContext[Any]) -> PreferencesStore | None:
        return await open_store(
            config=rt_ctx.config,
            matrix=rt_ctx.matrix,
            user_did=rt_ctx.user.did,
            cache=self._cache,
            logger=rt_ctx.logger,
        )

    def _lock(self, key: str) -> asyncio.Lock:
        slot = (id(asyncio.get_running_loop()), key)
        lock = self._locks.get(slot)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[slot] = lock
        return lock

    # --- hooks ----------------------------------------------------------------------

    async def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
        """``user_preferences`` for this turn; nothing (the last value stays) on failure."""
        try:
            store = await self._store(rt_ctx)
            record = None if store is None else await store.read()
        except Exception as exc:
            rt_ctx.logger.warning(
                "user preferences could not be read this turn: %s", type(exc).__name__
            )
            return {}
        return {"user_preferences": state_view(record)}

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """The tool, when the user has a place to store preferences.

        Raises when Matrix cannot be reached, so the prompt lists the capability as
        degraded for this turn.
        """
        return [] if await self._store(rt_ctx) is None else [self._tool]

    def get_routes(self, ctx: PluginContext[Any]) -> list[BaseRoute]:
        """``GET /user-preferences`` (authenticated by the server)."""
        logger = ctx.logger

        async def user_preferences(request: Request) -> Response:
            """The caller's stored preferences.

            The record as stored (``agentName``, ``language``, ``tone``, ``formality``,
            ``customInstructions``, ``updatedAt``), or ``null`` when there is none.
            """
            return await self._read_route(request, logger)

        return [Route(ROUTE_PATH, user_preferences, methods=["GET"])]

    # --- tool and route -------------------------------------------------------------

    async def _set_preferences(
        self, args: SetUserPreferencesArgs, rt_ctx: RuntimeContext[Any]
    ) -> str:
        try:
            store = await self._store(rt_ctx)
            if store is None:
                return _ERROR.format("this user has no room with the oracle yet")
            async with self._lock(store.key):
                # Bypass the cache: another replica or the portal may have written.
                current = await store.read(fresh=True)
                record = merge_record(current, args, datetime.now(UTC))
                await store.write(record)
        except Exception as exc:
            rt_ctx.logger.warning("set_user_preferences failed: %s", type(exc).__name__)
            return _ERROR.format(_reason(exc))
        return "Updated. New preferences: " + json.dumps(record, ensure_ascii=False)

    async def _read_route(self, request: Request, logger: logging.Logger) -> Response:
        rt_ctx = route_context(request)  # the host answers 401 without a user
        try:
            store = await self._store(rt_ctx)
            record = None if store is None else await store.read()
        except Exception as exc:
            logger.warning("GET %s failed: %s", ROUTE_PATH, type(exc).__name__)
            raise RouteError(
                503,
                "User preferences are temporarily unavailable",
                code="user_preferences.unavailable",
            ) from exc
        return JSONResponse(record)
