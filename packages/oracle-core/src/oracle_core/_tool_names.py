"""Who owns each tool name of one build (CORE-41), and the tools that give way.

Boot-time names are claimed first, then request-time names in plugin order: a name
already owned is dropped from the build with ``boot.registry.tool_collision``. Tools
marked ``overridable`` (the tools a client sends with its message) claim last: a name
that any other tool of the build has, even one assembled after them, stays with that
tool, and the client hears of its dropped tool through a ``warning`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from oracle_core._context import Emitter
from oracle_core._tools import PluginSubAgent, PluginTool

__all__ = ["SHADOWED_CODE", "ToolNames"]

META_TOOLS = ("list_capabilities", "load_capability")
SHADOWED_CODE = "tools.client_tool_shadowed"


def _listed(result: Any) -> Iterable[Any]:
    return result if isinstance(result, list | tuple) else ()


class ToolNames:
    """The owners of the tool names of one build.

    Args:
        boot_names: ``(name, plugin)`` of every boot-time tool and sub-agent tool.
        contributions: Each plugin's request-time hook results, by hook name; the names
            of its request-time tools that are not overridable are reserved from the
            start, so no overridable tool can take them whatever the plugin order.
        logger: Where collisions are logged.
        emit: Sends the ``warning`` event of a dropped overridable tool.
    """

    def __init__(
        self,
        boot_names: Iterable[tuple[str, str]],
        contributions: Mapping[str, Mapping[str, Any]],
        logger: logging.Logger,
        emit: Emitter | None,
    ) -> None:
        self._owners: dict[str, str] = {}
        for name, plugin in boot_names:
            self._owners.setdefault(name, plugin)
        self._reserved: dict[str, str] = {}
        for plugin, got in contributions.items():
            for item in _listed(got.get("get_request_tools")):
                if isinstance(item, PluginTool) and not item.overridable:
                    self._reserved.setdefault(item.name, plugin)
            for item in _listed(got.get("get_request_sub_agents")):
                if isinstance(item, PluginSubAgent):
                    self._reserved.setdefault(item.tool_name, plugin)
        self._logger = logger
        self._emit = emit

    def claim(self, name: str, plugin: str) -> bool:
        """CORE-41: a request-time name already assembled is dropped, the build goes on."""
        other = self._owners.get(name)
        if other is None and name not in META_TOOLS:
            self._owners[name] = plugin
            return True
        self._logger.error(
            "boot.registry.tool_collision: request-time tool '%s' of plugin '%s' collides "
            "with '%s'; dropped for this build",
            name,
            plugin,
            other or "oracle-core (meta-tool)",
        )
        return False

    def claim_tool(self, tool: PluginTool, plugin: str) -> bool:
        """Claim a request-time tool's name; an overridable tool gives way to any other."""
        if not tool.overridable:
            return self.claim(tool.name, plugin)
        other = self._owners.get(tool.name) or self._reserved.get(tool.name)
        if tool.name in META_TOOLS:
            other = "oracle-core"
        if other is None:
            self._owners[tool.name] = plugin
            return True
        self._logger.warning(
            "%s: tool '%s' of plugin '%s' has the name of a tool of '%s', which is used; "
            "dropped for this build",
            SHADOWED_CODE,
            tool.name,
            plugin,
            other,
        )
        if self._emit is not None:
            self._emit.warning(
                {
                    "code": SHADOWED_CODE,
                    "toolName": tool.name,
                    "message": (
                        f"The client's tool '{tool.name}' was not offered to the model: "
                        "the oracle has a tool of that name, which is used instead."
                    ),
                }
            )
        return False
