"""The meta-tools ``list_capabilities`` and ``load_capability`` (CORE-59 … 63)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field

from oracle_core._context import RuntimeContext
from oracle_core._manifest import PluginManifest
from oracle_core._tools import Effect, PluginTool

__all__ = ["CapabilityCatalog", "CatalogEntry", "ToolView", "meta_tools"]

LIST_CAPABILITIES = "list_capabilities"
LOAD_CAPABILITY = "load_capability"
EXPERIMENTAL_WARNING = (
    "Experimental: behaviour may change or fail; tell the user when relying on it."
)

LIST_DESCRIPTION = (
    "List every capability (plugin) this assistant can load, with what each is for and "
    "whether it is loaded. Call it when unsure whether a request can be handled before "
    "saying it cannot."
)
LOAD_DESCRIPTION = (
    "Load one or more capabilities by name so that their tools become available from "
    "your next step. Load everything the task needs in ONE call, passing all names "
    "together in `names`."
)


@dataclass(frozen=True)
class ToolView:
    """A tool as the model sees it, for ``load_capability`` results."""

    name: str
    description: str
    effect: Effect | None = None

    def to_wire(self) -> dict[str, Any]:
        """JSON form (``effect`` only when known)."""
        data: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.effect is not None:
            data["effect"] = self.effect
        return data


@dataclass(frozen=True)
class CatalogEntry:
    """One included plugin as the meta-tools present it."""

    name: str
    manifest: PluginManifest
    operating_guide: str | None = None
    tools: tuple[ToolView, ...] = ()
    has_on_demand_tools: bool = False

    @property
    def visibility(self) -> str:
        """The merged manifest's visibility."""
        return self.manifest.visibility


@dataclass(frozen=True)
class CapabilityCatalog:
    """Included plugins of one build, in topological order, plus the turn's preloads."""

    entries: Mapping[str, CatalogEntry]
    preloaded: frozenset[str] = field(default_factory=frozenset)

    def loadable(self) -> list[str]:
        """Names ``load_capability`` accepts."""
        return [n for n, e in self.entries.items() if e.visibility != "silent"]

    def is_loaded(self, name: str, thread_loaded: frozenset[str]) -> bool:
        """Whether the plugin's tools are visible this turn."""
        entry = self.entries[name]
        if name in thread_loaded or name in self.preloaded:
            return True
        return entry.visibility == "always" and not entry.has_on_demand_tools

    def list_capabilities(self, thread_loaded: frozenset[str]) -> list[dict[str, Any]]:
        """The ``list_capabilities`` payload (CORE-61)."""
        items = []
        for name, entry in self.entries.items():
            if entry.visibility == "silent":
                continue
            manifest = entry.manifest
            item: dict[str, Any] = {
                "name": name,
                "title": manifest.title,
                "summary": manifest.summary,
                "visibility": manifest.visibility,
                "loaded": self.is_loaded(name, thread_loaded),
                "category": manifest.category,
                "tags": list(manifest.tags),
                "stability": manifest.stability,
            }
            if manifest.stability == "experimental":
                item["warning"] = EXPERIMENTAL_WARNING
            items.append(item)
        return items

    def check_names(self, names: Sequence[str]) -> list[str]:
        """Problems with a ``load_capability`` batch, one line per bad name."""
        problems = []
        for name in names:
            entry = self.entries.get(name)
            if entry is None:
                problems.append(f"'{name}': no such capability")
            elif entry.visibility == "silent":
                problems.append(f"'{name}': this capability cannot be loaded")
        return problems

    def load_results(
        self, names: Sequence[str], thread_loaded: frozenset[str]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Names to add to ``loaded_plugins`` and the per-name results (CORE-59, 62)."""
        to_add: list[str] = []
        results: list[dict[str, Any]] = []
        for name in names:
            entry = self.entries[name]
            already = name in thread_loaded or (
                entry.visibility == "always" and not entry.has_on_demand_tools
            )
            if not already:
                to_add.append(name)
            result: dict[str, Any] = {
                "name": name,
                "title": entry.manifest.title,
                "alreadyAvailable": already,
                "manifest": entry.manifest.to_wire(),
                "tools": [t.to_wire() for t in entry.tools],
            }
            if entry.operating_guide:
                result["operatingGuide"] = entry.operating_guide
            results.append(result)
        return to_add, results


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoadCapabilityArgs(BaseModel):
    """Arguments of ``load_capability``."""

    model_config = ConfigDict(extra="forbid")

    names: list[str] = Field(
        min_length=1,
        description="Every capability name to load, all in this one call.",
    )


def _thread_loaded(rt_ctx: RuntimeContext[Any]) -> frozenset[str]:
    return rt_ctx.history.state.loaded_plugins


def _catalog_of(rt_ctx: RuntimeContext[Any]) -> CapabilityCatalog:
    turn = rt_ctx._turn
    if turn is None or turn.catalog is None:
        raise RuntimeError("the meta-tools run only inside an oracle agent turn")
    catalog: CapabilityCatalog = turn.catalog
    return catalog


def meta_tools() -> list[PluginTool]:
    """The two meta-tools; each call reads the catalog of its own turn."""

    def list_handler(args: _NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        payload = _catalog_of(rt_ctx).list_capabilities(_thread_loaded(rt_ctx))
        return json.dumps(payload, ensure_ascii=False)

    def load_handler(args: LoadCapabilityArgs, rt_ctx: RuntimeContext[Any]) -> Any:
        catalog = _catalog_of(rt_ctx)
        names = list(dict.fromkeys(n.strip() for n in args.names))
        tool_call_id = rt_ctx.tool_call_id or ""
        problems = catalog.check_names(names)
        if problems:
            loadable = ", ".join(catalog.loadable()) or "(none)"
            text = (
                "Nothing was loaded. Fix these names and call load_capability again:\n"
                + "\n".join(f"- {p}" for p in problems)
                + f"\nLoadable capabilities: {loadable}"
            )
            return ToolMessage(
                content=text, tool_call_id=tool_call_id, name=LOAD_CAPABILITY, status="error"
            )
        to_add, results = catalog.load_results(names, _thread_loaded(rt_ctx))
        message = ToolMessage(
            content=json.dumps({"results": results}, ensure_ascii=False),
            tool_call_id=tool_call_id,
            name=LOAD_CAPABILITY,
        )
        return Command(update={"loaded_plugins": to_add, "messages": [message]})

    return [
        PluginTool(
            name=LIST_CAPABILITIES,
            description=LIST_DESCRIPTION,
            args_schema=_NoArgs,
            handler=list_handler,
            visibility="always",
            effect="read",
        ),
        PluginTool(
            name=LOAD_CAPABILITY,
            description=LOAD_DESCRIPTION,
            args_schema=LoadCapabilityArgs,
            handler=load_handler,
            visibility="always",
            effect="read",
        ),
    ]
