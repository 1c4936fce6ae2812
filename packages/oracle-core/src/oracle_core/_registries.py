"""The six boot-time registries and their collision rules (§6)."""

from __future__ import annotations

import keyword
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from oracle_core._context import Accessor
from oracle_core._errors import OracleBootError
from oracle_core._manifest import PluginManifest
from oracle_core._tools import PluginSubAgent, PluginTool

__all__ = ["AuthExcludedRoute", "Registries"]

META_TOOL_NAMES: tuple[str, str] = ("list_capabilities", "load_capability")
FRAMEWORK_MIDDLEWARE_NAMES: tuple[str, ...] = (
    "capability-gate",
    "tool-validation",
    "tool-repetition-guard",
    "tool-retry",
    "page-context",
    "safety-guardrail",
)


@dataclass(frozen=True)
class AuthExcludedRoute:
    """A route the server serves without authentication.

    Attributes:
        path: Full mount path; the leading slash is optional.
        method: HTTP method, or ``None`` for every method.
    """

    path: str
    method: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", "/" + self.path.lstrip("/"))
        if self.method is not None:
            object.__setattr__(self, "method", self.method.upper())


@dataclass(frozen=True)
class Owned:
    """A registry entry and the plugin that contributed it."""

    owner: str
    value: Any


@dataclass
class Registries:
    """Tool, sub-agent, middleware, manifest, config-schema and shared-state registries.

    Filled once at boot, then frozen (``freeze``); read-only afterwards.
    """

    tools: dict[str, Owned] = field(default_factory=dict)
    sub_agents: dict[str, Owned] = field(default_factory=dict)
    middlewares: dict[str, list[Any]] = field(default_factory=dict)
    manifests: dict[str, PluginManifest] = field(default_factory=dict)
    config_schemas: dict[str, type[BaseModel]] = field(default_factory=dict)
    shared_state: dict[str, tuple[str, Accessor]] = field(default_factory=dict)
    _frozen: bool = False

    def _check_open(self) -> None:
        if self._frozen:
            raise RuntimeError("registries are frozen after boot")

    def _owner_of_name(self, name: str) -> str | None:
        if name in META_TOOL_NAMES:
            return "oracle-core (meta-tool)"
        for table in (self.tools, self.sub_agents):
            if name in table:
                return str(table[name].owner)
        return None

    def _tool_collision(self, name: str, owner: str, other: str) -> OracleBootError:
        return OracleBootError(
            f"tool '{name}' of plugin '{owner}' collides with the one of '{other}'",
            code="boot.registry.tool_collision",
            hint="tool and call_… names share one namespace; rename one of them",
        )

    def add_tool(self, owner: str, tool: PluginTool) -> None:
        """Register a boot-time tool."""
        self._check_open()
        other = self._owner_of_name(tool.name)
        if other is not None:
            raise self._tool_collision(tool.name, owner, other)
        self.tools[tool.name] = Owned(owner, tool)

    def add_sub_agent(self, owner: str, sub_agent: PluginSubAgent) -> None:
        """Register a boot-time sub-agent under its ``call_…`` name."""
        self._check_open()
        name = sub_agent.tool_name
        other = self._owner_of_name(name)
        if other is not None:
            raise self._tool_collision(name, owner, other)
        self.sub_agents[name] = Owned(owner, sub_agent)

    def add_middlewares(self, owner: str, middlewares: Sequence[Any]) -> None:
        """Register a plugin's middleware list; names must be unique (framework included)."""
        self._check_open()
        taken = {
            getattr(m, "name", type(m).__name__): o
            for o, ms in self.middlewares.items()
            for m in ms
        }
        taken.update(dict.fromkeys(FRAMEWORK_MIDDLEWARE_NAMES, "oracle-core"))
        for mw in middlewares:
            name = getattr(mw, "name", type(mw).__name__)
            if name in taken:
                raise OracleBootError(
                    f"middleware '{name}' of plugin '{owner}' collides with one of '{taken[name]}'",
                    code="boot.registry.middleware_name_collision",
                    hint="give the middleware a unique name (override the `name` property)",
                )
            taken[name] = owner
        self.middlewares[owner] = list(middlewares)

    def add_manifest(self, owner: str, manifest: PluginManifest, logger: logging.Logger) -> None:
        """Register a merged manifest; a repeated title is a warning."""
        self._check_open()
        for other, existing in self.manifests.items():
            if existing.title.casefold() == manifest.title.casefold():
                logger.warning(
                    "boot.registry.title_collision: plugins '%s' and '%s' share the title '%s'",
                    other,
                    owner,
                    manifest.title,
                )
        self.manifests[owner] = manifest

    def add_config_schema(self, owner: str, schema: type[BaseModel]) -> None:
        """Register a plugin's config schema (collisions are handled by env composition)."""
        self._check_open()
        self.config_schemas[owner] = schema

    def add_shared_state(self, owner: str, accessors: Mapping[str, Accessor]) -> None:
        """Register shared-state accessors; keys are flat and unique."""
        self._check_open()
        for key, accessor in accessors.items():
            if not key.isidentifier() or keyword.iskeyword(key) or key.startswith("_"):
                raise OracleBootError(
                    f"shared-state key {key!r} of plugin '{owner}' is not a public identifier",
                    code="boot.plugin.invalid",
                    hint="use a Python identifier that does not start with '_'",
                )
            if not callable(accessor):
                raise OracleBootError(
                    f"shared-state key '{key}' of plugin '{owner}' has no callable accessor",
                    code="boot.plugin.invalid",
                )
            if key in self.shared_state:
                raise OracleBootError(
                    f"shared-state key '{key}' of plugin '{owner}' is already published by "
                    f"'{self.shared_state[key][0]}'",
                    code="boot.registry.shared_key_collision",
                    hint="prefix the key with the plugin name",
                )
            self.shared_state[key] = (owner, accessor)

    def freeze(self) -> Registries:
        """Make every table read-only."""
        self.tools = MappingProxyType(self.tools)  # type: ignore[assignment]
        self.sub_agents = MappingProxyType(self.sub_agents)  # type: ignore[assignment]
        self.middlewares = MappingProxyType(  # type: ignore[assignment]
            {k: tuple(v) for k, v in self.middlewares.items()}
        )
        self.manifests = MappingProxyType(self.manifests)  # type: ignore[assignment]
        self.config_schemas = MappingProxyType(self.config_schemas)  # type: ignore[assignment]
        self.shared_state = MappingProxyType(self.shared_state)  # type: ignore[assignment]
        self._frozen = True
        return self

    def tools_of(self, owner: str) -> list[PluginTool]:
        """Boot-time tools of one plugin, in contribution order."""
        return [e.value for e in self.tools.values() if e.owner == owner]

    def sub_agents_of(self, owner: str) -> list[PluginSubAgent]:
        """Boot-time sub-agents of one plugin."""
        return [e.value for e in self.sub_agents.values() if e.owner == owner]
