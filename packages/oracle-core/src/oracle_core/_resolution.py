"""Plugin resolution: dedupe, feature toggles, auto-detect, dependencies, order (§4)."""

from __future__ import annotations

import difflib
import heapq
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from oracle_core._errors import OracleBootError
from oracle_core._manifest import ManifestBackends
from oracle_core._plugin import OraclePlugin

__all__ = [
    "BUNDLED_PLUGIN_NAMES",
    "BackendSelection",
    "ExcludedPlugin",
    "FeatureValue",
    "PluginStatusChangeEvent",
    "PluginStatusReport",
    "SoftDependencyGap",
]

BUNDLED_PLUGIN_NAMES: tuple[str, ...] = (
    "memory",
    "portal",
    "firecrawl",
    "domain-indexer",
    "composio",
    "sandbox",
    "skills",
    "editor",
    "agui",
    "slack",
    "tasks",
    "credits",
    "calls",
    "user-preferences",
    "matrix-group-chats",
    "vfs",
)
"""The bundled plugins (stable names). Core ships none of them."""

FeatureValue = bool | Literal["auto"]
ExclusionCode = Literal["feature_disabled", "auto_detect_failed", "dependency_excluded"]


@dataclass(frozen=True)
class ExcludedPlugin:
    """A candidate that was not included, and why."""

    plugin: str
    code: ExclusionCode
    reason: str


@dataclass(frozen=True)
class SoftDependencyGap:
    """A soft dependency that is not included."""

    plugin: str
    missing: str


@dataclass(frozen=True)
class FailedPlugin:
    """A discovered entry point that could not be loaded (non-strict discovery)."""

    plugin: str
    distribution: str | None
    reason: str


@dataclass(frozen=True)
class PluginStatusReport:
    """What ``runtime.plugins.status()`` returns (CORE-31); a copy."""

    loaded: list[str]
    excluded: list[ExcludedPlugin]
    soft_dep_gaps: list[SoftDependencyGap]
    versions: dict[str, str]
    failed: list[FailedPlugin] = field(default_factory=list)
    backends: dict[str, str] = field(default_factory=dict)
    """The backend each loaded plugin that declares ``backends`` runs on."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "loaded": list(self.loaded),
            "excluded": [vars(e) for e in self.excluded],
            "soft_dep_gaps": [vars(g) for g in self.soft_dep_gaps],
            "versions": dict(self.versions),
            "failed": [vars(f) for f in self.failed],
            "backends": dict(self.backends),
        }


@dataclass(frozen=True)
class PluginStatusChangeEvent:
    """A plugin moved between ``pending``, ``loaded`` and ``failed`` (CORE-32)."""

    plugin: str
    from_: Literal["pending", "loaded", "failed"]
    to: Literal["pending", "loaded", "failed"]
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form with ``from`` as the key."""
        return {"plugin": self.plugin, "from": self.from_, "to": self.to, "reason": self.reason}


@dataclass
class Resolution:
    """Result of resolving candidates: included plugins in topological order.

    Attributes:
        backends: The chosen backend of each included plugin that declares them.
        backend_env: Variables to set for the plugins' configs: the embedded backends the
            runtime chose where the environment named none.
    """

    ordered: list[OraclePlugin]
    excluded: list[ExcludedPlugin]
    soft_dep_gaps: list[SoftDependencyGap]
    backends: dict[str, str] = field(default_factory=dict)
    backend_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendSelection:
    """What the environment says about the backends (03-plugins §0).

    Attributes:
        declared: Each candidate's ``manifest.backends``, by plugin name.
        env: The environment (the backend variables are read from it).
        local: ``ORACLE_BACKEND=local``: a plugin with an embedded backend is on by default.
    """

    declared: Mapping[str, ManifestBackends] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    local: bool = False

    def choose(self, name: str, *, ready: bool, forced: bool) -> str | None:
        """The backend plugin ``name`` runs on; ``None`` when it has no backend to run on.

        Args:
            name: The plugin.
            ready: Its ``auto_detect`` passed (or it has none).
            forced: ``features[name] is True``.
        """
        declared = self.declared.get(name)
        if declared is None:
            return None
        named = (self.env.get(declared.variable) or "").strip()
        if named:
            # The operator's choice; the plugin's config_schema checks the value.
            return named if ready or named == declared.embedded else None
        if ready:
            return declared.default
        if declared.embedded is not None and (forced or (self.local and declared.local)):
            return declared.embedded
        return None

    def announce(
        self, name: str, backend: str, hint: str, *, forced: bool, logger: logging.Logger
    ) -> dict[str, str]:
        """Log that plugin ``name`` runs embedded without its environment; returns the
        variable to set so that its config reads the backend (none when already named)."""
        variable = self.declared[name].variable
        named = bool((self.env.get(variable) or "").strip())
        why = (
            f"{variable} names it"
            if named
            else "forced on by features"
            if forced
            else "ORACLE_BACKEND=local"
        )
        logger.info(
            "boot.plugin.embedded_backend: plugin '%s' runs on its embedded backend "
            "(%s=%s): %s, and its environment is missing (%s)",
            name,
            variable,
            backend,
            why,
            hint,
        )
        return {} if named else {variable: backend}


def dedupe_candidates(
    discovered: Sequence[OraclePlugin], user: Sequence[OraclePlugin]
) -> list[OraclePlugin]:
    """Discovered plugins, each replaced by a user instance of the same name (CORE-25)."""
    seen: set[str] = set()
    for plugin in user:
        if plugin.name in seen:
            raise OracleBootError(
                f"two plugins passed in plugins= are named '{plugin.name}'",
                code="boot.plugin.duplicate_name",
                hint="plugin names must be unique; pass each plugin once",
            )
        seen.add(plugin.name)
    by_name = {p.name: p for p in discovered}
    by_name.update({p.name: p for p in user})
    return list(by_name.values())


def check_features(
    features: Mapping[str, Any], candidate_names: Iterable[str], logger: logging.Logger
) -> None:
    """Validate toggle values and warn on keys that match no candidate (CORE-27)."""
    names = set(candidate_names)
    for key, value in features.items():
        if value is not True and value is not False and value != "auto":
            raise OracleBootError(
                f"features['{key}'] is {value!r}",
                code="boot.plugin.invalid",
                hint="use True, False or 'auto'",
            )
        if key not in names:
            pool = sorted(names | set(BUNDLED_PLUGIN_NAMES))
            close = difflib.get_close_matches(key, pool, n=3, cutoff=0.5)
            if not close:
                normalised = key.replace("_", "-").lower()
                close = [n for n in pool if n.replace("-", "") == normalised.replace("-", "")]
            logger.warning(
                "boot.feature.unknown_key: features key '%s' matches no plugin%s",
                key,
                f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "",
            )


def resolve(
    candidates: Sequence[OraclePlugin],
    features: Mapping[str, FeatureValue],
    auto_detect: Callable[[OraclePlugin], bool | None],
    logger: logging.Logger,
    backends: BackendSelection | None = None,
) -> Resolution:
    """Apply toggles, auto-detect, backends and dependencies; sort topologically
    (CORE-26 … 30, 03-plugins §0).

    Args:
        candidates: Deduplicated candidates.
        features: Toggles by plugin name (missing = ``"auto"``).
        auto_detect: Runs a plugin's ``auto_detect``; ``None`` when it has none.
        logger: Boot logger.
        backends: The declared backends and the environment choosing among them. A plugin
            whose environment is missing still runs on its embedded backend when it is
            forced on, or by default with ``ORACLE_BACKEND=local``.
    """
    selection = backends or BackendSelection()
    by_name = {p.name: p for p in candidates}
    excluded: dict[str, ExcludedPlugin] = {}
    included: dict[str, OraclePlugin] = {}
    chosen: dict[str, str] = {}
    told: dict[str, dict[str, str]] = {}  # plugin → the backend variable set for it
    for plugin in candidates:
        toggle = features.get(plugin.name, "auto")
        if toggle is False:
            excluded[plugin.name] = ExcludedPlugin(
                plugin.name, "feature_disabled", "disabled by features"
            )
            continue
        detected = auto_detect(plugin)
        ready = detected is None or detected
        backend = selection.choose(plugin.name, ready=ready, forced=toggle is True)
        if backend is not None:
            chosen[plugin.name] = backend
        if ready:
            included[plugin.name] = plugin
            continue
        hint = plugin.auto_detect_hint or "auto_detect returned False"
        if backend is not None:
            told[plugin.name] = selection.announce(
                plugin.name, backend, hint, forced=toggle is True, logger=logger
            )
            included[plugin.name] = plugin
            continue
        if toggle is True:
            raise OracleBootError(
                f"plugin '{plugin.name}' is enabled by features but its environment is "
                f"missing: {hint}",
                code="boot.plugin.env_missing",
                hint=f"provide it, or set features['{plugin.name}'] = False",
            )
        excluded[plugin.name] = ExcludedPlugin(
            plugin.name, "auto_detect_failed", f"auto_detect: {hint}"
        )

    _cascade_dependencies(included, excluded, by_name, features, logger)

    ordered = topological_order(list(included.values()))
    gaps: list[SoftDependencyGap] = []
    for plugin in ordered:
        for soft in plugin.soft_depends_on:
            if soft not in included:
                logger.info(
                    "boot.plugin.soft_dep_missing: plugin '%s' runs without optional '%s'",
                    plugin.name,
                    soft,
                )
                gaps.append(SoftDependencyGap(plugin.name, soft))
    ordered_excluded = [excluded[p.name] for p in candidates if p.name in excluded]
    return Resolution(
        ordered=ordered,
        excluded=ordered_excluded,
        soft_dep_gaps=gaps,
        backends={name: backend for name, backend in chosen.items() if name in included},
        backend_env={k: v for name in told if name in included for k, v in told[name].items()},
    )


def _cascade_dependencies(
    included: dict[str, OraclePlugin],
    excluded: dict[str, ExcludedPlugin],
    by_name: Mapping[str, OraclePlugin],
    features: Mapping[str, FeatureValue],
    logger: logging.Logger,
) -> None:
    """Exclude ``auto`` dependants of excluded plugins, to a fixed point (CORE-28).

    Raises:
        OracleBootError: ``boot.plugin.dep_missing`` for a dependency that cannot cascade.
    """
    changed = True
    while changed:
        changed = False
        for name in sorted(included):
            plugin = included[name]
            for dep in plugin.depends_on:
                if dep in included:
                    continue
                reason = excluded.get(dep)
                cascades = (
                    reason is not None
                    and reason.code in ("auto_detect_failed", "dependency_excluded")
                    and features.get(name, "auto") == "auto"
                )
                if not cascades:
                    why = (
                        "is not installed or passed"
                        if dep not in by_name
                        else "is disabled by features"
                        if reason is not None and reason.code == "feature_disabled"
                        else f"is excluded ({reason.reason})"
                        if reason is not None
                        else "is not included"
                    )
                    raise OracleBootError(
                        f"plugin '{name}' needs '{dep}', which {why}",
                        code="boot.plugin.dep_missing",
                        hint=f"enable {dep} or set features={{'{name}': False}}",
                    )
                logger.warning(
                    "boot.plugin.cascaded_off: plugin '%s' excluded because dependency "
                    "'%s' is not loaded",
                    name,
                    dep,
                )
                excluded[name] = ExcludedPlugin(
                    name, "dependency_excluded", f"dependency '{dep}' not loaded"
                )
                del included[name]
                changed = True
                break


def topological_order(plugins: Sequence[OraclePlugin]) -> list[OraclePlugin]:
    """Kahn's algorithm over ``depends_on``, ties by ascending name (CORE-29)."""
    by_name = {p.name: p for p in plugins}
    indegree = dict.fromkeys(by_name, 0)
    dependants: dict[str, list[str]] = {name: [] for name in by_name}
    for plugin in plugins:
        for dep in dict.fromkeys(plugin.depends_on):
            if dep in by_name:
                indegree[plugin.name] += 1
                dependants[dep].append(plugin.name)
    ready = [name for name, degree in indegree.items() if degree == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for child in dependants[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(ready, child)
    if len(order) < len(by_name):
        cycle = _find_cycle({n: p.depends_on for n, p in by_name.items() if n not in order})
        raise OracleBootError(
            f"plugin dependency cycle: {' → '.join(cycle)}",
            code="boot.plugin.dep_cycle",
            hint="remove one depends_on edge of the cycle (use soft_depends_on instead)",
        )
    return [by_name[name] for name in order]


def _find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str]:
    for start in sorted(graph):
        path: list[str] = []
        node: str | None = start
        while node is not None and node not in path:
            path.append(node)
            node = next((d for d in sorted(graph.get(node, ())) if d in graph), None)
        if node is not None:
            cycle = path[path.index(node) :]
            return [*cycle, node]
    return sorted(graph)
