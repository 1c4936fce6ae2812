"""``validate_plugin``: the conformance suite every plugin distribution runs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from oracle_core._discovery import ENTRY_POINT_GROUP, load_entry_point
from oracle_core._manifest import validate_manifest
from oracle_core._plugin import OraclePlugin, check_plugin_object
from oracle_core.testing._runtime import TestRuntime, create_test_runtime

__all__ = ["ConformanceCheck", "ConformanceReport", "validate_plugin"]


@dataclass(frozen=True)
class ConformanceCheck:
    """One check of the suite."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class ConformanceReport:
    """All checks run against one plugin."""

    plugin: str
    checks: list[ConformanceCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(c.ok for c in self.checks)

    def failures(self) -> list[ConformanceCheck]:
        """The failed checks."""
        return [c for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        """Record a check."""
        self.checks.append(ConformanceCheck(name, ok, detail))

    def __str__(self) -> str:
        lines = [f"conformance of plugin '{self.plugin}':"]
        lines += [
            f"  [{'ok' if c.ok else 'FAIL'}] {c.name}{': ' + c.detail if c.detail else ''}"
            for c in self.checks
        ]
        return "\n".join(lines)


async def validate_plugin(
    plugin: OraclePlugin,
    *,
    config: Mapping[str, str] | None = None,
    with_plugins: Sequence[OraclePlugin] = (),
    entry_point: bool = False,
    allow_manifest_warnings: bool = False,
    state: Mapping[str, Any] | None = None,
    extra_checks: Sequence[Callable[[TestRuntime], Awaitable[None]]] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run the conformance suite against ``plugin``.

    Checks: attributes and hook names; the manifest (hard rules, and soft ones unless
    ``allow_manifest_warnings``); boot in a test runtime with ``config``; tool names,
    descriptions and argument JSON schemas; examples naming real tools; request-time
    hooks and a prompt build on a default request without degradation; meta-tool
    listing; lifespan exit; and, with ``entry_point=True``, registration in the
    ``oracle.plugins`` group under the plugin's name.

    Args:
        plugin: The plugin instance to check.
        config: Plugin environment for the boot.
        with_plugins: Plugins it depends on, booted alongside.
        entry_point: Also require an ``oracle.plugins`` entry point for it.
        allow_manifest_warnings: Accept soft manifest warnings.
        state: State for the default request (e.g. ``user_context``).
        extra_checks: More async checks run against the booted test runtime.
        raise_on_failure: Raise ``AssertionError`` with the report when a check fails.

    Returns:
        The report (all checks, passed or failed).
    """
    name = getattr(plugin, "name", "?")
    report = ConformanceReport(plugin=str(name))
    try:
        check_plugin_object(plugin)
        report.add("attributes and hook names", True)
    except Exception as exc:
        report.add("attributes and hook names", False, str(exc))
        return _finish(report, raise_on_failure)

    result = validate_manifest(plugin.manifest, plugin.name)
    problems = list(result.errors) + ([] if allow_manifest_warnings else list(result.warnings))
    report.add("manifest rules", not problems, "; ".join(problems))

    if entry_point:
        eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == plugin.name]
        if not eps:
            report.add("entry point", False, f"no '{ENTRY_POINT_GROUP}' entry point '{name}'")
        else:
            try:
                loaded = load_entry_point(eps[0])
                # Compared by identity fields: a factory may build a fresh class per call.
                same = loaded.name == plugin.name and loaded.version == plugin.version
                report.add("entry point", same, eps[0].value)
            except Exception as exc:
                report.add("entry point", False, str(exc))

    try:
        runtime = await create_test_runtime(
            plugins=[*with_plugins, plugin],
            config=config,
            features={plugin.name: True},
            state=state,
        )
    except Exception as exc:
        report.add("boot", False, f"{type(exc).__name__}: {exc}")
        return _finish(report, raise_on_failure)
    report.add("boot", True)
    try:
        await _runtime_checks(report, runtime, plugin)
        for check in extra_checks:
            label = getattr(check, "__name__", "extra check")
            try:
                await check(runtime)
                report.add(label, True)
            except Exception as exc:
                report.add(label, False, f"{type(exc).__name__}: {exc}")
    finally:
        try:
            await runtime.aclose()
            report.add("lifespan exit", True)
        except Exception as exc:
            report.add("lifespan exit", False, str(exc))
    return _finish(report, raise_on_failure)


async def _runtime_checks(
    report: ConformanceReport, runtime: TestRuntime, plugin: OraclePlugin
) -> None:
    try:
        runtime.assert_manifest_valid()
        report.add("manifest examples name real tools", True)
    except AssertionError as exc:
        report.add("manifest examples name real tools", False, str(exc))
    try:
        built = await runtime.build("conformance check")
    except Exception as exc:
        report.add("agent build", False, f"{type(exc).__name__}: {exc}")
        return
    degraded = [what for owner, what in built.degraded if owner == plugin.name]
    report.add("request-time hooks", not degraded, ", ".join(degraded))
    own = [i for i in built.tool_infos.values() if i.owner == plugin.name]
    schema_problems = []
    for tool in built.tools:
        info = built.tool_infos.get(tool.name)
        if info is None or info.owner != plugin.name:
            continue
        if not tool.description.strip():
            schema_problems.append(f"{tool.name}: empty description")
        try:
            schema = tool.tool_call_schema
            as_json = schema if isinstance(schema, dict) else schema.model_json_schema()
            json.dumps(as_json)
        except Exception as exc:
            schema_problems.append(f"{tool.name}: schema not serialisable ({exc})")
        args_schema = getattr(getattr(tool, "plugin_tool", None), "args_schema", None)
        if isinstance(args_schema, type) and issubclass(args_schema, BaseModel):
            extra = args_schema.model_config.get("extra")
            if extra == "allow":
                schema_problems.append(f"{tool.name}: args schema allows unknown keys")
    report.add("tool schemas", not schema_problems, "; ".join(schema_problems))
    report.add("tools visible to the runtime", True, ", ".join(i.name for i in own) or "(none)")
    try:
        listed = await runtime.list_capabilities()
        names = [item["name"] for item in listed]
        expect = runtime.get_manifest(plugin.name).visibility != "silent"
        report.add(
            "list_capabilities",
            (plugin.name in names) == expect,
            f"listed: {names}",
        )
    except Exception as exc:
        report.add("list_capabilities", False, f"{type(exc).__name__}: {exc}")


def _finish(report: ConformanceReport, raise_on_failure: bool) -> ConformanceReport:
    if raise_on_failure and not report.ok:
        raise AssertionError(str(report))
    return report
