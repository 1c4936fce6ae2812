"""``user-preferences-agent-name``: the user's name for the oracle in the identity line.

The core prompt renders ``agent_name`` as a bullet of its "User Preferences" section, but
its identity section ("You are {name}…") always uses the configured name, and no prompt
slot lets a plugin change it. Until one does, this middleware rewrites the configured
name in the first section of each model call's system message (the copy sent to the
model; the stored prompt is untouched).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage

__all__ = ["AgentNameMiddleware", "rename_identity"]


def rename_identity(prompt: str, oracle_name: str, agent_name: str) -> str:
    """``prompt`` with ``oracle_name`` replaced by ``agent_name`` in its first section.

    Only whole-word occurrences before the first blank line change: that section is
    the identity (the operator's ``prompt.opening`` or ``You are {name}…``); later
    sections may quote the oracle's name for other reasons.
    """
    name = oracle_name.strip()
    agent = agent_name.strip()
    if not name or not agent or name == agent:
        return prompt
    head, separator, rest = prompt.partition("\n\n")
    pattern = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
    renamed = pattern.sub(lambda _match: agent, head)
    return f"{renamed}{separator}{rest}"


def _agent_name(state: Any) -> str | None:
    prefs = state.get("user_preferences") if isinstance(state, Mapping) else None
    if not isinstance(prefs, Mapping):
        return None
    name = prefs.get("agent_name")
    return name if isinstance(name, str) and name.strip() else None


class AgentNameMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Puts ``state.user_preferences.agent_name`` in place of the oracle's name.

    Args:
        oracle_name: The configured name (``identity.name``).
    """

    def __init__(self, oracle_name: str) -> None:
        super().__init__()
        self._oracle_name = oracle_name

    @property
    def name(self) -> str:
        """``user-preferences-agent-name``."""
        return "user-preferences-agent-name"

    def _renamed(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        agent = _agent_name(request.state)
        message = request.system_message
        if agent is None or message is None or not isinstance(message.content, str):
            return request
        text = rename_identity(message.content, self._oracle_name, agent)
        if text == message.content:
            return request
        return request.override(system_message=SystemMessage(content=text))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the renamed identity."""
        return handler(self._renamed(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Call the model with the renamed identity."""
        return await handler(self._renamed(request))
