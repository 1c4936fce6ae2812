"""The boot pipeline behind ``create_runtime`` (CORE-95), one function per stage."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from oracle_core._config import ComposedConfig, OracleConfig
from oracle_core._context import OracleIdentity, PluginContext
from oracle_core._errors import ManifestValidationError, OracleBootError
from oracle_core._hookcall import MISSING, HookCaller
from oracle_core._manifest import (
    ManifestBackends,
    PluginManifest,
    apply_manifest_override,
    parse_manifest,
    validate_manifest,
)
from oracle_core._plugin import OraclePlugin
from oracle_core._prompt import CapabilityEntry, capability_budget
from oracle_core._registries import AuthExcludedRoute, Registries
from oracle_core._tools import PluginCapability, PluginSubAgent, PluginTool

__all__ = [
    "BootedPlugin",
    "apply_manifests",
    "declared_backends",
    "enter_lifespans",
    "loadable_manifests",
    "warm_plugins",
]


@dataclass
class BootedPlugin:
    """An included plugin after boot: merged manifest, context and cached outputs."""

    plugin: OraclePlugin
    manifest: PluginManifest
    ctx: PluginContext[Any] | None = None
    tools: list[PluginTool] = field(default_factory=list)
    sub_agents: list[PluginSubAgent] = field(default_factory=list)
    capabilities: list[PluginCapability] = field(default_factory=list)
    middlewares: list[Any] = field(default_factory=list)
    sub_agent_middlewares: list[Any] = field(default_factory=list)
    boot_failures: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The plugin name."""
        return self.plugin.name


def loadable_manifests(booted: Sequence[BootedPlugin]) -> Iterator[tuple[str, PluginManifest]]:
    """Every plugin's name and manifest, each followed by those of its declared capabilities."""
    for entry in booted:
        yield entry.name, entry.manifest
        for capability in entry.capabilities:
            yield capability.name, capability.manifest


def apply_manifests(
    plugins: Sequence[OraclePlugin],
    overrides: Mapping[str, Mapping[str, Any]],
    logger: logging.Logger,
) -> list[BootedPlugin]:
    """Parse manifests, apply overrides, check structural rules (CORE-21 … 24).

    Raises:
        ManifestValidationError: every hard failure of every plugin, together.
    """
    names = {p.name for p in plugins}
    for key in overrides:
        if key not in names:
            logger.warning(
                "boot.plugin.manifest_override_unknown: manifest_overrides names '%s', "
                "which is not loaded; ignored",
                key,
            )
    booted: list[BootedPlugin] = []
    errors: list[str] = []
    for plugin in plugins:
        manifest, problems = parse_manifest(plugin.manifest, plugin.name)
        if manifest is not None and plugin.name in overrides:
            manifest, problems = apply_manifest_override(
                manifest, overrides[plugin.name], plugin.name
            )
        if manifest is None:
            errors.extend(problems)
            continue
        result = validate_manifest(manifest, plugin.name)
        errors.extend(result.errors)
        for warning in result.warnings:
            logger.warning("boot.manifest.warning: %s", warning)
        booted.append(BootedPlugin(plugin=plugin, manifest=manifest))
    if errors:
        raise ManifestValidationError(errors)
    return booted


def declared_backends(
    plugins: Sequence[OraclePlugin], overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, ManifestBackends]:
    """Each plugin's ``manifest.backends`` (overrides applied), read before resolution.

    A manifest that does not parse declares nothing here; ``apply_manifests`` reports it.
    """
    declared: dict[str, ManifestBackends] = {}
    for plugin in plugins:
        manifest, _ = parse_manifest(plugin.manifest, plugin.name)
        if manifest is not None and plugin.name in overrides:
            manifest, _ = apply_manifest_override(manifest, overrides[plugin.name], plugin.name)
        if manifest is not None and manifest.backends is not None:
            declared[plugin.name] = manifest.backends
    return declared


def build_identity(config: OracleConfig, composed: ComposedConfig) -> OracleIdentity:
    """``OracleIdentity`` from the config and ``ORACLE_ENTITY_DID`` (CORE-38)."""
    core = composed.core
    if not core.is_local and not (core.oracle_entity_did or "").strip():
        raise OracleBootError(
            "ORACLE_ENTITY_DID is empty",
            code="boot.identity.entity_did_missing",
            hint="set ORACLE_ENTITY_DID to the oracle's entity DID, or ORACLE_BACKEND=local",
        )
    prompt = {
        k: v for k, v in config.prompt.model_dump().items() if isinstance(v, str) and v.strip()
    }
    return OracleIdentity(
        name=config.name,
        org=config.org,
        description=config.description,
        entity_did=core.oracle_entity_did,
        prompt=prompt,
    )


async def enter_lifespans(
    stack: AsyncExitStack, booted: Sequence[BootedPlugin], caller: HookCaller
) -> None:
    """Enter each plugin's ``lifespan`` in topological order; the stack exits in reverse."""
    for entry in booted:
        cm = caller.call_sync(entry.name, "lifespan", ctx=entry.ctx)
        if cm is MISSING:
            continue
        try:
            await stack.enter_async_context(cm)
        except Exception as exc:
            raise OracleBootError(
                f"lifespan of plugin '{entry.name}' failed to start: {type(exc).__name__}: {exc}",
                code="boot.plugin.load_failed",
                hint="see the traceback above; the plugin's own logs say more",
            ) from exc


async def _collect_list(
    entry: BootedPlugin, caller: HookCaller, hook: str, logger: logging.Logger
) -> list[Any]:
    """Run a boot-time list hook whose failure degrades the plugin instead of failing boot."""
    try:
        result = await caller.call(entry.name, hook, ctx=entry.ctx)
    except Exception as exc:
        logger.exception("plugin '%s' %s failed; it contributes nothing there", entry.name, hook)
        entry.boot_failures.append(f"{hook}: {type(exc).__name__}")
        return []
    if result is MISSING or result is None:
        return []
    return list(result)


async def _required(entry: BootedPlugin, caller: HookCaller, hook: str, **kwargs: Any) -> Any:
    """Run a boot-time hook whose failure fails boot."""
    try:
        return await caller.call(entry.name, hook, **kwargs)
    except OracleBootError:
        raise
    except Exception as exc:
        raise OracleBootError(
            f"plugin '{entry.name}' {hook} raised {type(exc).__name__}: {exc}",
            code="boot.plugin.invalid",
        ) from exc


async def warm_plugins(
    booted: Sequence[BootedPlugin],
    caller: HookCaller,
    registries: Registries,
    logger: logging.Logger,
) -> tuple[list[tuple[str, Any]], list[AuthExcludedRoute]]:
    """Collect boot-time outputs into the registries (CORE-95 step 9).

    Returns:
        ``(plugin, route)`` pairs and the auth-excluded routes.
    """
    routes: list[tuple[str, Any]] = []
    excluded: list[AuthExcludedRoute] = []
    manifest_errors: list[str] = []
    claimed = {entry.name: "a plugin" for entry in booted}
    for entry in booted:
        registries.add_manifest(entry.name, entry.manifest, logger)
        if entry.plugin.config_schema is not None:
            registries.add_config_schema(entry.name, entry.plugin.config_schema)
        await _warm_capabilities(entry, caller, claimed, logger)
        await _warm_tools(entry, caller, registries, logger)
        await _warm_sub_agents(entry, caller, registries, logger)
        await _warm_middlewares(entry, caller, registries, logger)
        shared = await _required(entry, caller, "get_shared_state")
        if shared is not MISSING and shared:
            registries.add_shared_state(entry.name, shared)
        plugin_routes = await _required(entry, caller, "get_routes", ctx=entry.ctx)
        if plugin_routes is not MISSING and plugin_routes:
            routes.extend((entry.name, route) for route in plugin_routes)
        excluded.extend(await _auth_excluded_routes(entry, caller))
        # Only now are the plugin's tool names known, so its examples can be checked.
        tool_names = [t.name for t in entry.tools] + [s.tool_name for s in entry.sub_agents]
        result = validate_manifest(entry.manifest, entry.name, tool_names)
        manifest_errors.extend(e for e in result.errors if ".tool:" in e)
    if manifest_errors:
        raise ManifestValidationError(manifest_errors)
    return routes, excluded


async def _warm_capabilities(
    entry: BootedPlugin, caller: HookCaller, claimed: dict[str, str], logger: logging.Logger
) -> None:
    for capability in await _collect_list(entry, caller, "get_capabilities", logger):
        if not isinstance(capability, PluginCapability):
            raise OracleBootError(
                f"plugin '{entry.name}' get_capabilities returned {type(capability).__name__}",
                code="boot.plugin.invalid",
                hint="return PluginCapability objects",
            )
        holder = claimed.get(capability.name)
        if holder is not None:
            raise OracleBootError(
                f"plugin '{entry.name}' declares the capability '{capability.name}', which "
                f"is already the name of {holder}",
                code="boot.plugin.capability_clash",
                hint="give the capability another name",
            )
        claimed[capability.name] = f"a capability of plugin '{entry.name}'"
        entry.capabilities.append(capability)


async def _warm_tools(
    entry: BootedPlugin, caller: HookCaller, registries: Registries, logger: logging.Logger
) -> None:
    for tool in await _collect_list(entry, caller, "get_tools", logger):
        if not isinstance(tool, PluginTool):
            raise OracleBootError(
                f"plugin '{entry.name}' get_tools returned {type(tool).__name__}",
                code="boot.plugin.invalid",
                hint="return PluginTool objects (see plugin_tool)",
            )
        registries.add_tool(entry.name, tool)
        entry.tools.append(tool)


async def _warm_sub_agents(
    entry: BootedPlugin, caller: HookCaller, registries: Registries, logger: logging.Logger
) -> None:
    for sub in await _collect_list(entry, caller, "get_sub_agents", logger):
        if not isinstance(sub, PluginSubAgent):
            raise OracleBootError(
                f"plugin '{entry.name}' get_sub_agents returned {type(sub).__name__}",
                code="boot.plugin.invalid",
            )
        registries.add_sub_agent(entry.name, sub)
        entry.sub_agents.append(sub)


async def _warm_middlewares(
    entry: BootedPlugin, caller: HookCaller, registries: Registries, logger: logging.Logger
) -> None:
    from oracle_core._middleware import check_plugin_middleware, wrap_plugin_middleware

    middlewares = await _collect_list(entry, caller, "get_middlewares", logger)
    for mw in middlewares:
        check_plugin_middleware(entry.name, mw)
    registries.add_middlewares(entry.name, middlewares)
    entry.middlewares = [wrap_plugin_middleware(entry.name, mw) for mw in middlewares]
    entry.sub_agent_middlewares = [
        wrapped
        for wrapped, mw in zip(entry.middlewares, middlewares, strict=True)
        if getattr(mw, "reaches_sub_agents", False) is True
    ]


async def _auth_excluded_routes(entry: BootedPlugin, caller: HookCaller) -> list[AuthExcludedRoute]:
    plugin_excluded = await _required(entry, caller, "get_auth_excluded_routes")
    excluded: list[AuthExcludedRoute] = []
    if plugin_excluded is MISSING or not plugin_excluded:
        return excluded
    for item in plugin_excluded:
        if not isinstance(item, AuthExcludedRoute):
            raise OracleBootError(
                f"plugin '{entry.name}' get_auth_excluded_routes returned {type(item).__name__}",
                code="boot.plugin.invalid",
                hint="return AuthExcludedRoute(path, method=None) entries",
            )
        excluded.append(item)
    return excluded


def check_capability_budget(booted: Sequence[BootedPlugin], logger: logging.Logger) -> int:
    """Warn when the Tier-1 block of ``always`` plugins passes 5,000 tokens (CORE-69)."""
    from oracle_core._prompt import CAPABILITY_BUDGET_TOKENS

    entries = [CapabilityEntry(name=n, manifest=m) for n, m in loadable_manifests(booted)]
    total, largest = capability_budget(entries)
    if total > CAPABILITY_BUDGET_TOKENS:
        logger.warning(
            "boot.prompt.capability_budget_exceeded: Tier-1 capability entries take ~%d "
            "tokens (budget %d); largest: %s. Consider making some plugins on-demand.",
            total,
            CAPABILITY_BUDGET_TOKENS,
            ", ".join(f"{name} (~{tokens})" for name, tokens in largest),
        )
    return total
