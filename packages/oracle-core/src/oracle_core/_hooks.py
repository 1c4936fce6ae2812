"""Host hooks of the main agent (CORE-97): how an application customises a runtime."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from oracle_core._manifest import PluginManifest

if TYPE_CHECKING:
    from datetime import datetime

    from langchain_core.language_models import BaseChatModel
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from oracle_core._context import RuntimeContext

__all__ = ["MainAgentHooks", "RouterInput"]

TextHook = str | Callable[["RuntimeContext[Any]"], "str | Awaitable[str | None] | None"]
"""A prompt text: fixed, or computed per build from the request's ``RuntimeContext``."""


@dataclass(frozen=True)
class RouterInput:
    """What a capability router sees once per turn (CORE-64).

    Attributes:
        text: The latest user message.
        loaded_plugins: Plugins already loaded in the thread.
        manifests: The ``on-demand`` plugins' merged manifests by name, in
            topological order.
    """

    text: str
    loaded_plugins: frozenset[str]
    manifests: Mapping[str, PluginManifest]


@dataclass(frozen=True)
class MainAgentHooks:
    """Optional host hooks; each ``None`` keeps the runtime's default.

    Attributes:
        resolve_model: ``(role, **params) -> BaseChatModel``; the runtime calls it only as
            ``resolve_model("main")``, or ``resolve_model("main", model=id)`` when the turn
            selects a model (``TurnRequest.model``).
        checkpointer_for_user: ``async (user_did) -> BaseCheckpointSaver``.
        get_room_title: ``async (room_id) -> str``; adds the ``page-context`` middleware.
        safety_model: A chat model that answers ``SAFE``/``UNSAFE``; adds
            ``safety-guardrail``.
        validation_skip_tool_names: Tools whose messages ``tool-validation`` removes from
            model requests.
        operational_mode: Section 12 text when no plugin sets one.
        editor_section: Section 14 text (wins over the plugin block).
        composio_context: Section 13 text (wins over the plugin block).
        user_secrets_context: Section 10 text (secret-name bullets).
        degraded_services_block: Appended to section 16.
        capability_router: ``async (RouterInput) -> names`` to preload for one turn.
        clock: ``() -> datetime``, read once per build for the prompt's date and the
            current-time note when the client sends no time (naive means UTC).
    """

    resolve_model: Callable[..., BaseChatModel] | None = None
    checkpointer_for_user: Callable[[str], Awaitable[BaseCheckpointSaver[Any]]] | None = None
    get_room_title: Callable[[str], Awaitable[str | None]] | None = None
    safety_model: BaseChatModel | None = None
    validation_skip_tool_names: Sequence[str] = field(default_factory=tuple)
    operational_mode: TextHook | None = None
    editor_section: TextHook | None = None
    composio_context: TextHook | None = None
    user_secrets_context: TextHook | None = None
    degraded_services_block: TextHook | None = None
    capability_router: Callable[[RouterInput], Awaitable[Sequence[str]]] | None = None
    clock: Callable[[], datetime] | None = None

    def merged_over(self, defaults: MainAgentHooks) -> MainAgentHooks:
        """These hooks over ``defaults``; a set hook here wins per key."""
        changes = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) not in (None, ())
        }
        return replace(defaults, **changes)
