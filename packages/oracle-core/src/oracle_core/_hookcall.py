"""Pluggy registration and per-plugin hook calls.

Hooks are called one plugin at a time (never through pluggy's combined call), so each
result and each failure is attributed to its plugin.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import pluggy

from oracle_core import hookspecs
from oracle_core._errors import OracleBootError
from oracle_core._plugin import HOOK_NAMES, OraclePlugin

__all__ = ["MISSING", "HookCaller"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by ``HookCaller.call`` when the plugin does not implement the hook."""


class HookCaller:
    """A pluggy manager over the candidates, with attributed per-plugin calls."""

    def __init__(self, plugins: Sequence[OraclePlugin]) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        for plugin in plugins:
            try:
                self.pm.register(plugin, name=plugin.name)
            except pluggy.PluginValidationError as exc:
                raise OracleBootError(
                    f"plugin '{plugin.name}' has a hook implementation that does not match "
                    f"its spec: {exc}",
                    code="boot.plugin.unknown_hook",
                    hint="hook parameters must be a subset of the spec's (see "
                    "oracle_core.hookspecs)",
                ) from exc
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            failed = getattr(exc, "plugin", None)
            owner = getattr(failed, "name", None) or self.pm.get_name(failed) or "?"
            raise OracleBootError(
                f"plugin '{owner}' implements an unknown hook: {exc}",
                code="boot.plugin.unknown_hook",
                hint=f"known hooks are {', '.join(sorted(HOOK_NAMES))}",
            ) from exc
        self._impls: dict[tuple[str, str], Any] = {}
        for hook in HOOK_NAMES:
            caller = getattr(self.pm.hook, hook)
            for impl in caller.get_hookimpls():
                self._impls[(impl.plugin_name, hook)] = impl

    def unregister(self, name: str) -> None:
        """Drop an excluded plugin so its hooks are never called."""
        self.pm.unregister(name=name)
        for key in [k for k in self._impls if k[0] == name]:
            del self._impls[key]

    def implements(self, plugin: str, hook: str) -> bool:
        """Whether ``plugin`` implements ``hook``."""
        return (plugin, hook) in self._impls

    def call_sync(self, plugin: str, hook: str, **kwargs: Any) -> Any:
        """Call a hook; returns ``MISSING`` when not implemented (result not awaited)."""
        impl = self._impls.get((plugin, hook))
        if impl is None:
            return MISSING
        return impl.function(**{name: kwargs[name] for name in impl.argnames})

    async def call(self, plugin: str, hook: str, **kwargs: Any) -> Any:
        """Call a hook, awaiting an awaitable result; ``MISSING`` when not implemented."""
        result = self.call_sync(plugin, hook, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
