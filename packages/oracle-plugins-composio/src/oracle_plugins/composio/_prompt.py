"""The prompt's Composio section (slot ``composio_context``), for the tools that loaded."""

from __future__ import annotations

from collections.abc import Collection

from oracle_plugins.composio._envelope import ENVELOPE_EXAMPLE
from oracle_plugins.composio._names import (
    GET_TOOL_SCHEMAS,
    MANAGE_CONNECTIONS,
    MULTI_EXECUTE_TOOL,
    SEARCH_TOOLS,
)

__all__ = ["composio_block"]

_STEPS: tuple[tuple[str, str], ...] = (
    (
        MANAGE_CONNECTIONS,
        f"**Connect.** Before acting in an app that needs the user's account, call "
        f"`{MANAGE_CONNECTIONS}` with its toolkit. If it returns a `redirect_url`, give the "
        "user exactly that link as a markdown link and stop until they say they have "
        "connected. Only ever show the `redirect_url` it returned: never write, guess or "
        "shorten a link yourself.",
    ),
    (
        SEARCH_TOOLS,
        f"**Discover.** Call `{SEARCH_TOOLS}`, describing the action in plain words, to "
        "find the exact tool slugs. Never invent a slug: use only slugs a Composio tool "
        "returned.",
    ),
    (
        GET_TOOL_SCHEMAS,
        f"**Inspect.** When unsure of a tool's parameters, call `{GET_TOOL_SCHEMAS}` with "
        "its slugs and follow the schema it returns.",
    ),
    (
        MULTI_EXECUTE_TOOL,
        f"**Execute.** Run app tools only through `{MULTI_EXECUTE_TOOL}`, with exactly "
        f"`{ENVELOPE_EXAMPLE}`: no other top-level keys, never a slug as a key.",
    ),
)


def composio_block(tool_names: Collection[str]) -> str:
    """The section for the meta-tools bound this request (empty when none are).

    Args:
        tool_names: The meta-tools the user's session gave this request.
    """
    steps = [text for name, text in _STEPS if name in tool_names]
    if not steps:
        return ""
    lines = [
        "Composio reaches the user's SaaS apps (email, calendar, issue trackers, docs, "
        "CRMs, chat) and web searches through its meta-tools; app tools such as "
        "`GMAIL_SEND_EMAIL` are never called directly.",
    ]
    lines.extend(f"{i}. {text}" for i, text in enumerate(steps, start=1))
    lines.append(
        "Before anything destructive or visible to others (sending, posting, deleting, "
        "paying, changing shared data), say exactly what you will do and get the user's "
        "explicit confirmation first."
    )
    return "\n".join(lines)
