"""The system prompt of one turn, from what the build gathered (CORE-65 … 75)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from oracle_core._boot import loadable_manifests
from oracle_core._context import RuntimeContext
from oracle_core._hookcall import MISSING
from oracle_core._hooks import TextHook
from oracle_core._prompt import (
    PROMPT_SLOTS,
    CapabilityEntry,
    PromptInputs,
    SystemPrompt,
    compose_system_prompt,
)

if TYPE_CHECKING:
    from oracle_core._runtime import OracleRuntime

__all__ = ["PromptParts", "compose_turn_prompt"]


@dataclass
class PromptParts:
    """What the build hands the prompt.

    Attributes:
        thread_loaded: ``state.loaded_plugins`` of the thread (no router preloads).
        contributions: The request-time hooks' results, by plugin and hook.
        degraded: ``(plugin, what failed)`` so far; prompt-block failures are added.
        now: The build's clock reading.
    """

    thread_loaded: frozenset[str]
    contributions: Mapping[str, Mapping[str, Any]]
    degraded: list[tuple[str, str]]
    now: datetime


async def _resolve_text(hook: TextHook | None, ctx: RuntimeContext[Any]) -> str | None:
    if hook is None or isinstance(hook, str):
        return hook
    value = hook(ctx)
    if inspect.isawaitable(value):
        value = await value
    return value if isinstance(value, str) else None


async def compose_turn_prompt(
    rt: OracleRuntime, ctx: RuntimeContext[Any], parts: PromptParts
) -> SystemPrompt:
    """The turn's system prompt: plugin blocks, host hook texts and the thread's state.

    A plugin whose ``get_prompt_blocks`` failed is added to ``parts.degraded``.
    """
    logger = rt.logger
    thread_loaded, contributions = parts.thread_loaded, parts.contributions
    degraded, now = parts.degraded, parts.now
    blocks: dict[str, str] = {}
    block_owner: dict[str, str] = {}
    for entry in rt.booted:
        result = contributions.get(entry.name, {}).get("get_prompt_blocks", MISSING)
        if result is MISSING or not result:
            continue
        if isinstance(result, BaseException):
            logger.error(
                "get_prompt_blocks of plugin '%s' failed: %s",
                entry.name,
                result,
                exc_info=result,
            )
            degraded.append((entry.name, "prompt blocks"))
            continue
        for slot, text in dict(result).items():
            if slot not in PROMPT_SLOTS:
                logger.warning(
                    "plugin '%s' filled unknown prompt slot '%s'; ignored", entry.name, slot
                )
                continue
            if slot in block_owner:
                logger.warning(
                    "prompt slot '%s' filled by '%s' and '%s'; '%s' wins",
                    slot,
                    block_owner[slot],
                    entry.name,
                    entry.name,
                )
            blocks[slot], block_owner[slot] = text, entry.name
    hooks = rt.hooks
    texts = await asyncio.gather(
        *(
            _resolve_text(h, ctx)
            for h in (
                hooks.operational_mode,
                hooks.editor_section,
                hooks.composio_context,
                hooks.user_secrets_context,
                hooks.degraded_services_block,
            )
        )
    )
    secret_names: list[str] = []
    if ctx.secrets is not None and texts[3] is None and "user_secrets" not in blocks:
        try:
            secret_names = [s.name for s in await ctx.secrets.get_index()]
        except Exception:
            logger.exception("reading the user's secret index failed")
    state = ctx.history.state
    guides = {b.name: b.plugin.operating_guide for b in rt.booted}
    guides.update((c.name, c.operating_guide) for b in rt.booted for c in b.capabilities)
    entries = [
        CapabilityEntry(name=name, manifest=manifest, operating_guide=guides.get(name))
        for name, manifest in loadable_manifests(rt.booted)
    ]
    return compose_system_prompt(
        PromptInputs(
            config=rt.oracle_config,
            plugins=entries,
            loaded_plugins=thread_loaded,
            user_context=state.user_context,
            timezone=ctx.user.timezone,
            current_time=ctx.user.current_time,
            now=now,
            current_entity_did=state.get("current_entity_did"),
            secret_names=secret_names,
            user_secrets_context=texts[3],
            user_preferences=state.user_preferences,
            plugin_blocks=blocks,
            operational_mode=texts[0],
            editor_section=texts[1],
            composio_context=texts[2],
            client=ctx.session.client,
            degraded=degraded,
            degraded_services_block=texts[4],
        )
    )
