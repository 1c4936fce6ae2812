"""Module attributes loaded on first use (PEP 562), for the package and its testing kit."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    namespace: MutableMapping[str, Any], module_name: str, sources: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``name`` imported from ``sources[name]`` on first use,
    then kept in ``namespace`` (the module's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
