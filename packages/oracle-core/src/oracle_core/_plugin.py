"""The plugin base class, the functional form, and the checks on plugin attributes."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from oracle_core import hookspecs
from oracle_core._errors import OracleBootError
from oracle_core._manifest import PluginManifest

__all__ = [
    "HOOK_NAMES",
    "OraclePlugin",
    "define_oracle_plugin",
    "not_a_hook",
]

PLUGIN_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
NEAR_MISS_RATIO = 0.85
_NOT_A_HOOK = "__oracle_not_a_hook__"
_IMPL_MARK = f"{hookspecs.PROJECT_NAME}_impl"

HOOK_NAMES: frozenset[str] = frozenset(
    name
    for name, value in vars(hookspecs).items()
    if callable(value) and hasattr(value, f"{hookspecs.PROJECT_NAME}_spec")
)
"""Names of every hook in ``oracle_core.hookspecs``."""

ATTRIBUTE_NAMES: frozenset[str] = frozenset(
    {
        "name",
        "version",
        "manifest",
        "depends_on",
        "soft_depends_on",
        "config_schema",
        "auto_detect_hint",
        "operating_guide",
    }
)

F = TypeVar("F", bound=Callable[..., Any])


def not_a_hook(func: F) -> F:
    """Mark a public method whose name resembles a hook as an ordinary method."""
    setattr(func, _NOT_A_HOOK, True)
    return func


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def near_miss_hook(name: str) -> str | None:
    """The hook that ``name`` looks like a misspelling of, if any (CORE-8)."""
    if name in HOOK_NAMES or name.startswith("_"):
        return None
    snake = _camel_to_snake(name)
    if snake != name and snake in HOOK_NAMES:
        return snake
    best = max(HOOK_NAMES, key=lambda hook: difflib.SequenceMatcher(None, name, hook).ratio())
    if difflib.SequenceMatcher(None, name, best).ratio() >= NEAR_MISS_RATIO:
        return best
    return None


def _closest(key: str, candidates: frozenset[str]) -> str:
    matches = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.0)
    return matches[0] if matches else ""


class OraclePlugin:
    """Base class of every plugin (CORE-4).

    Subclasses set ``name``, ``version`` and ``manifest`` and define any hook of
    ``oracle_core.hookspecs`` as a method of the same name (sync or ``async``); such
    methods are hook implementations without a decorator.

    Attributes:
        name: Unique kebab-case name; keys ``features`` and ``manifest_overrides``.
        version: Reported in ``status()``.
        manifest: ``PluginManifest`` or a dict in either key style.
        depends_on: Plugins that must be included (and come earlier in order).
        soft_depends_on: Plugins used when present.
        config_schema: Pydantic model whose field names or aliases are env var names.
        auto_detect_hint: What ``auto_detect`` checks, quoted when it excludes the plugin.
        operating_guide: Extra prompt guidance shown once the plugin is loaded.
    """

    name: str
    version: str
    manifest: PluginManifest | Mapping[str, Any]
    depends_on: tuple[str, ...] = ()
    soft_depends_on: tuple[str, ...] = ()
    config_schema: type[BaseModel] | None = None
    auto_detect_hint: str | None = None
    operating_guide: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attr, value in list(vars(cls).items()):
            if attr in HOOK_NAMES:
                func = value.__func__ if isinstance(value, staticmethod | classmethod) else value
                if callable(func) and not hasattr(func, _IMPL_MARK):
                    hookspecs.hookimpl(func)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {getattr(self, 'name', '?')!r}>"

    def implemented_hooks(self) -> frozenset[str]:
        """Names of the hooks this plugin implements."""
        return frozenset(h for h in HOOK_NAMES if callable(getattr(self, h, None)))

    def _public_members(self) -> Iterator[tuple[str, Any]]:
        base = set(dir(OraclePlugin))
        for attr in dir(self):
            if attr.startswith("_") or attr in base or attr in ATTRIBUTE_NAMES:
                continue
            yield attr, getattr(self, attr, None)


def check_plugin_object(plugin: Any, *, source: str | None = None) -> OraclePlugin:
    """Check the attributes of a plugin instance (CORE-4, CORE-8).

    Raises:
        OracleBootError: ``boot.plugin.invalid`` or ``boot.plugin.unknown_hook``.
    """
    where = f" (from {source})" if source else ""
    if not isinstance(plugin, OraclePlugin):
        raise OracleBootError(
            f"{plugin!r}{where} is not an OraclePlugin",
            code="boot.plugin.invalid",
            hint="subclass oracle_core.OraclePlugin or use define_oracle_plugin(...)",
        )
    name = _checked_name(plugin, where)
    problems = _attribute_problems(plugin)
    if problems:
        raise OracleBootError(
            f"plugin '{name}'{where} is invalid: " + "; ".join(problems),
            code="boot.plugin.invalid",
        )
    _refuse_near_miss_hooks(plugin, name)
    return plugin


def _checked_name(plugin: OraclePlugin, where: str) -> str:
    # Checked before the other attributes: every later message quotes the name.
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not PLUGIN_NAME_RE.fullmatch(name):
        raise OracleBootError(
            f"plugin {type(plugin).__name__}{where} has invalid name {name!r}",
            code="boot.plugin.invalid",
            hint="use kebab-case, e.g. 'weather' or 'domain-indexer'",
        )
    return name


def _attribute_problems(plugin: OraclePlugin) -> list[str]:
    """Every wrong plugin attribute, so that one boot error lists them all."""
    problems: list[str] = []
    if not isinstance(getattr(plugin, "version", None), str):
        problems.append("version must be a string")
    if not isinstance(getattr(plugin, "manifest", None), PluginManifest | Mapping):
        problems.append("manifest must be a PluginManifest or a dict")
    for attr in ("depends_on", "soft_depends_on"):
        value = getattr(plugin, attr, ())
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            problems.append(f"{attr} must be a tuple of plugin names")
    schema = getattr(plugin, "config_schema", None)
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        problems.append("config_schema must be a pydantic BaseModel subclass or None")
    for attr in ("auto_detect_hint", "operating_guide"):
        value = getattr(plugin, attr, None)
        if value is not None and not isinstance(value, str):
            problems.append(f"{attr} must be a string or None")
    return problems


def _refuse_near_miss_hooks(plugin: OraclePlugin, name: str) -> None:
    for attr, value in plugin._public_members():
        if not callable(value) or getattr(value, _NOT_A_HOOK, False):
            continue
        hook = near_miss_hook(attr)
        if hook is not None:
            raise OracleBootError(
                f"plugin '{name}' method '{attr}' looks like hook '{hook}' but is not one",
                code="boot.plugin.unknown_hook",
                hint=f"rename it to '{hook}', or decorate it with @not_a_hook",
            )


def define_oracle_plugin(
    *, name: str, version: str, manifest: PluginManifest | Mapping[str, Any], **members: Any
) -> OraclePlugin:
    """Build a plugin from attributes and hook callables (CORE-9).

    Hook callables take the hook's arguments without ``self``. The result is
    interchangeable with an instance of an ``OraclePlugin`` subclass.

    Raises:
        TypeError: A key is neither a plugin attribute nor a hook; the message names the
            closest valid name.
    """
    valid = (ATTRIBUTE_NAMES | HOOK_NAMES) - {"name", "version", "manifest"}
    namespace: dict[str, Any] = {"name": name, "version": version, "manifest": manifest}
    for key, value in members.items():
        if key not in valid:
            raise TypeError(
                f"define_oracle_plugin() got an unexpected key {key!r}; "
                f"did you mean {_closest(key, valid)!r}?"
            )
        if key in HOOK_NAMES:
            if not callable(value):
                raise TypeError(f"define_oracle_plugin() hook {key!r} must be callable")
            # Wrap so that marking never mutates the caller's function.
            namespace[key] = (
                staticmethod(value) if hasattr(value, _IMPL_MARK) else _as_static_hook(value)
            )
        else:
            namespace[key] = value
    cls_name = "".join(part.capitalize() for part in re.split(r"[-_]", name)) + "Plugin"
    cls = type(cls_name, (OraclePlugin,), namespace)
    return cls()  # type: ignore[no-any-return]


def _as_static_hook(func: Callable[..., Any]) -> staticmethod[..., Any]:
    # functools.wraps sets __wrapped__, which pluggy follows to read the parameter names.
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs)

        return staticmethod(async_wrapper)

    @functools.wraps(func)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return staticmethod(sync_wrapper)
