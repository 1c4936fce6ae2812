"""The private names of LangGraph and its stack: all declared, all present, all behind one door.

An upgrade that removes or renames one fails ``test_every_private_name_is_where_it_was``
naming it and what uses it; a private import added anywhere but the compat module fails
``test_private_names_are_used_only_through_the_compat_module``.

This module imports nothing from ``oracle_core`` at run time: after such an upgrade that
import fails, and the tests here must still run and name every missing entry.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import importlib.util
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if TYPE_CHECKING:
    from oracle_core._langgraph_compat import ExtHook, PrivateName

ROOT = Path(__file__).resolve().parents[3]
COMPAT = ROOT / "packages/oracle-core/src/oracle_core/_langgraph_compat.py"
SOURCES = (
    "packages/*/src",
    "packages/*/tests",
    "apps/*/src",
    "apps/*/tests",
    "tests",
    "benchmarks",
)


def _compat_from_file() -> tuple[ModuleType, ImportError | None]:
    """The compat module run from its file, and the ``ImportError`` that stopped it, if any.

    Its declarations come before its imports, so they are there even when an import
    fails. The run is a module of its own: ``oracle_core._langgraph_compat`` is untouched.
    """
    spec = importlib.util.spec_from_file_location("compat_from_file", COMPAT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        return module, exc
    return module, None


compat, _ = _compat_from_file()
PRIVATE_NAMES: tuple[PrivateName, ...] = compat.PRIVATE_NAMES
SUPPORTED_RANGES: dict[str, str] = compat.SUPPORTED_RANGES
# The entries the compat module imports (the others are attributes and overridden methods).
IMPORTED = [entry for entry in PRIVATE_NAMES if "." not in entry.name]
# LangSmith's and the OpenAI SDK's are imported on first use (test_tracing, test_providers).
IMPORTED_AT_IMPORT = [
    entry for entry in IMPORTED if entry.distribution not in {"langsmith", "openai"}
]


def _installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "(not installed)"


def _resolve(entry: PrivateName) -> Any:
    """What ``entry`` names, looked up the way the compat module's users reach it."""
    found: Any = importlib.import_module(entry.module)
    for part in entry.name.split("."):
        if part.endswith("()"):
            found = getattr(found, part.removesuffix("()"))()
        else:
            found = getattr(found, part)
    return found


@pytest.mark.parametrize("entry", PRIVATE_NAMES, ids=lambda entry: entry.path)
def test_every_private_name_is_where_it_was(entry: PrivateName) -> None:
    dist = entry.distribution
    try:
        found = _resolve(entry)
    except (ImportError, AttributeError) as exc:
        error = exc
    else:
        # A flag (``SqliteSaver._has_task_path``) is a class-level bool.
        assert callable(found) or isinstance(found, property | bool), (
            f"{entry.path} is no longer a class, function, property or flag: {found!r}"
        )
        return
    pytest.fail(
        f"{dist} upgrade removed {entry.path} (used by {entry.used_by}): installed"
        f" {dist} {_installed(dist)}, supported {dist}{SUPPORTED_RANGES[dist]}; find what"
        f" replaced it, update oracle_core._langgraph_compat, then the range ({error!r})",
        pytrace=False,
    )


def _python_files() -> Iterator[Path]:
    for pattern in SOURCES:
        for folder in sorted(ROOT.glob(pattern)):
            yield from sorted(folder.rglob("*.py"))


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_packages() -> frozenset[str]:
    """Top-level import names installed by distributions from outside the workspace."""
    pyprojects = [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("apps/*/pyproject.toml")]
    workspace = {_normalised(tomllib.loads(p.read_text())["project"]["name"]) for p in pyprojects}
    return frozenset(
        top
        for top, dists in packages_distributions().items()
        if any(_normalised(d) not in workspace for d in dists)
    )


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _private_uses(tree: ast.Module, third_party: frozenset[str]) -> Iterator[tuple[int, str]]:
    """``(line, dotted path)`` of each private name of a third-party package ``tree`` uses.

    Covers ``from a._b import c``, ``from a import _c``, ``import a._b``,
    ``importlib.import_module("a._b")`` and ``a._b.c`` after ``import a``.
    """
    modules = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.asname is None and "." not in alias.name
    } & third_party
    for node in ast.walk(tree):
        for path in _private_paths(node, third_party, modules):
            yield getattr(node, "lineno", 0), path


def _private_paths(node: ast.AST, third_party: frozenset[str], modules: set[str]) -> Iterator[str]:
    """The private dotted paths of third-party packages that one node names."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module.split(".")[0] in third_party:
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                if any(_private(part) for part in path.split(".")):
                    yield path
    elif isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if _private_module(alias.name, third_party))
    elif isinstance(node, ast.Call) and node.args:
        func = _dotted(node.func)
        target = node.args[0]
        if (
            func is not None
            and func[-1] in {"import_module", "__import__"}
            and isinstance(target, ast.Constant)
            and isinstance(target.value, str)
            and _private_module(target.value, third_party)
        ):
            yield target.value
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        dotted = _dotted(node)
        if dotted and dotted[0] in modules and _private(dotted[-1]):
            yield ".".join(dotted)


def _private_module(name: str, third_party: frozenset[str]) -> bool:
    parts = name.split(".")
    return parts[0] in third_party and any(_private(part) for part in parts)


def test_private_names_are_used_only_through_the_compat_module() -> None:
    third_party = _third_party_packages()
    assert {"langgraph", "langsmith", "langchain_core"} <= third_party
    outside = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in _python_files()
        if path != COMPAT
        for line, name in _private_uses(ast.parse(path.read_text()), third_party)
    ]
    assert outside == [], (
        "private names of dependencies used outside oracle_core._langgraph_compat; import"
        " them there, list them in PRIVATE_NAMES and take them from it:\n" + "\n".join(outside)
    )


def test_the_compat_module_declares_every_private_name_it_imports() -> None:
    imported = {
        name for _, name in _private_uses(ast.parse(COMPAT.read_text()), _third_party_packages())
    }
    assert imported == {entry.path for entry in IMPORTED}


def test_the_scan_finds_each_form_of_private_use() -> None:
    source = (
        "import importlib\n"
        "import langsmith\n"
        "from langgraph.pregel._checkpoint import copy_checkpoint\n"
        "from langgraph.graph.message import _messages_delta_reducer, add_messages\n"
        "import langgraph.pregel._loop\n"
        "importlib.import_module('langsmith._runtime_overrides')\n"
        "langsmith._runtime_overrides.get_runtime_overrides()\n"
        "from oracle_core._state import MainAgentState\n"
        "from os import _exit\n"
    )
    found = sorted(_private_uses(ast.parse(source), _third_party_packages()))
    assert found == [
        (3, "langgraph.pregel._checkpoint.copy_checkpoint"),
        (4, "langgraph.graph.message._messages_delta_reducer"),
        (5, "langgraph.pregel._loop"),
        (6, "langsmith._runtime_overrides"),
        (7, "langsmith._runtime_overrides"),
    ]


def test_supported_ranges_are_what_pyproject_declares_and_what_is_installed() -> None:
    project = tomllib.loads((ROOT / "packages/oracle-core/pyproject.toml").read_text())
    declared = {
        _normalised(req.name): req.specifier
        for req in map(Requirement, project["project"]["dependencies"])
    }
    assert {entry.distribution for entry in PRIVATE_NAMES} <= set(SUPPORTED_RANGES)
    for dist, supported in SUPPORTED_RANGES.items():
        assert declared.get(dist) == SpecifierSet(supported), dist
        assert _installed(dist) in SpecifierSet(supported), dist


@pytest.mark.parametrize("entry", IMPORTED_AT_IMPORT, ids=lambda entry: entry.path)
def test_a_missing_name_fails_the_compat_import_naming_it(
    entry: PrivateName, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if an upgrade had dropped the name (LangGraph's own modules hold it already).
    monkeypatch.delattr(importlib.import_module(entry.module), entry.name)

    _, error = _compat_from_file()

    assert error is not None
    message = str(error)
    assert message.startswith("dependency.private_name_missing: ")
    assert f"has no {entry.path}, which oracle-core uses in {entry.used_by}" in message
    assert f"supports {entry.distribution}{SUPPORTED_RANGES[entry.distribution]}" in message


SCRIPT = """
import importlib, sys
import oracle_core  # with every dependency LangGraph itself needs loaded
for name in [n for n in sys.modules if n.split(".")[0] == "oracle_core"]:
    del sys.modules[name]
# As if an upgrade had dropped the name: only oracle-core's own import can miss it now.
del importlib.import_module("langgraph.pregel._checkpoint").copy_checkpoint
import oracle_core
"""


def test_a_missing_name_fails_import_oracle_core_not_a_turn() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )

    expected = compat.missing_private_name("langgraph.pregel._checkpoint.copy_checkpoint")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"ImportError: {expected}"


def test_a_serializer_without_its_ext_hook_fails_naming_it() -> None:
    serializer = JsonPlusSerializer()
    del serializer._unpack_ext_hook  # as if LangGraph kept the hook elsewhere

    with pytest.raises(ImportError, match="private_name_missing") as failed:
        compat.wrap_msgpack_ext_hook(serializer, lambda hook: hook)

    assert "JsonPlusSerializer()._unpack_ext_hook" in str(failed.value)
    assert f"langgraph-checkpoint{SUPPORTED_RANGES['langgraph-checkpoint']}" in str(failed.value)


def test_wrapping_the_ext_hook_puts_the_wrapper_in_front() -> None:
    serializer = JsonPlusSerializer()
    original = compat.msgpack_ext_hook(serializer)
    seen: list[int] = []

    def wrap(fallback: ExtHook) -> ExtHook:
        def hook(code: int, data: bytes) -> Any:
            seen.append(code)
            return fallback(code, data)

        return hook

    compat.wrap_msgpack_ext_hook(serializer, wrap)
    value = {"when": datetime.date(2026, 1, 2)}

    assert serializer.loads_typed(serializer.dumps_typed(value)) == value
    assert seen  # the date went through the wrapper, then LangGraph's hook
    assert compat.msgpack_ext_hook(serializer) is not original
