"""Discovery of plugins from the ``oracle.plugins`` entry-point group (CORE-10)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from oracle_core._errors import OracleBootError
from oracle_core._plugin import OraclePlugin, check_plugin_object
from oracle_core._resolution import FailedPlugin

__all__ = ["ENTRY_POINT_GROUP", "discover_plugins"]

ENTRY_POINT_GROUP = "oracle.plugins"


@dataclass(frozen=True)
class Discovery:
    """Plugins loaded from entry points, and those that failed to load."""

    plugins: list[OraclePlugin]
    failed: list[FailedPlugin]


def _distribution(ep: EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return None if dist is None else str(dist.name)


def load_entry_point(ep: EntryPoint) -> OraclePlugin:
    """Load one entry point into a checked plugin instance.

    Raises:
        OracleBootError: ``boot.plugin.load_failed`` naming entry point and distribution.
    """
    dist = _distribution(ep)
    where = f"entry point '{ep.name}' ({ep.value}) of distribution '{dist or 'unknown'}'"
    try:
        obj: Any = ep.load()
        if isinstance(obj, type) and issubclass(obj, OraclePlugin):
            obj = obj()
        elif not isinstance(obj, OraclePlugin) and callable(obj):
            obj = obj()
        plugin = check_plugin_object(obj, source=where)
    except OracleBootError as exc:
        raise OracleBootError(
            f"{where} could not be loaded: {exc.message}",
            code="boot.plugin.load_failed",
            hint=exc.hint,
        ) from exc
    except Exception as exc:
        raise OracleBootError(
            f"{where} could not be loaded: {type(exc).__name__}: {exc}",
            code="boot.plugin.load_failed",
            hint=f"fix or uninstall '{dist}', or set features['{ep.name}'] = False",
        ) from exc
    if plugin.name != ep.name:
        raise OracleBootError(
            f"{where} provides plugin '{plugin.name}'; the entry-point name must equal it",
            code="boot.plugin.load_failed",
            hint=f"rename the entry point to '{plugin.name}'",
        )
    return plugin


def discover_plugins(
    features: Mapping[str, Any], *, strict: bool, logger: logging.Logger
) -> Discovery:
    """Load every ``oracle.plugins`` entry point not disabled by ``features``.

    A broken entry point is logged (``boot.plugin.load_failed``, with its distribution)
    and skipped, unless ``strict`` is set or the plugin is forced on by
    ``features[name] = True``, in which case boot fails.
    """
    plugins: list[OraclePlugin] = []
    failed: list[FailedPlugin] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if features.get(ep.name) is False:
            continue  # never imported
        try:
            plugins.append(load_entry_point(ep))
        except OracleBootError as exc:
            if strict or features.get(ep.name) is True:
                raise
            logger.error("[boot-error] %s: %s", exc.code, exc)
            failed.append(FailedPlugin(ep.name, _distribution(ep), exc.message))
    return Discovery(plugins=plugins, failed=failed)
