"""Tests of ``oracle_core.hookspecs``: the specs, their docs and their tests (CORE-5, CORE-7)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy
import pytest

from oracle_core import HOOK_NAMES, hookimpl, hookspecs

TESTS_DIR = Path(__file__).resolve().parent

# The hooks of CORE-5 and the parameters each receives.
SPEC_TABLE: dict[str, tuple[str, ...]] = {
    "auto_detect": ("env",),
    "get_capabilities": ("ctx",),
    "get_tools": ("ctx",),
    "get_request_tools": ("rt_ctx",),
    "get_sub_agents": ("ctx",),
    "get_request_sub_agents": ("rt_ctx",),
    "get_middlewares": ("ctx",),
    "get_shared_state": (),
    "get_routes": ("ctx",),
    "get_auth_excluded_routes": (),
    "lifespan": ("ctx",),
    "get_turn_state": ("rt_ctx",),
    "get_prompt_blocks": ("rt_ctx",),
    "on_session_event": ("event", "rt_ctx"),
}

DOC_LABELS = ("When", "Receives", "Returns", "If it raises")


def repo_root() -> Path:
    """The workspace root: the nearest ancestor holding ``pyproject.toml`` and ``packages/``."""
    for parent in TESTS_DIR.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "packages").is_dir():
            return parent
    raise AssertionError(f"no workspace root above {TESTS_DIR}")


def spec_function(name: str) -> object:
    return getattr(hookspecs, name)


def registered_spec_names() -> set[str]:
    """Hook names as pluggy sees them after ``add_hookspecs``."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return {name for name in vars(pm.hook) if not name.startswith("_")}


def test_hook_names_equal_the_registered_specs() -> None:
    assert set(HOOK_NAMES) == registered_spec_names()


def test_hook_names_are_the_hooks_of_the_spec_table() -> None:
    assert set(HOOK_NAMES) == set(SPEC_TABLE)


def test_hooks_belong_to_project_oracle() -> None:
    assert hookspecs.PROJECT_NAME == "oracle"
    assert hookimpl.project_name == "oracle"
    assert hookspecs.hookspec.project_name == "oracle"


@pytest.mark.parametrize("hook", sorted(SPEC_TABLE))
def test_hookspec_parameters_match_the_spec_table(hook: str) -> None:
    func = spec_function(hook)
    assert callable(func)
    assert hasattr(func, "oracle_spec")
    assert tuple(inspect.signature(func).parameters) == SPEC_TABLE[hook]


@pytest.mark.parametrize("hook", sorted(HOOK_NAMES))
def test_hookspec_docstring_says_when_receives_returns_and_if_it_raises(hook: str) -> None:
    doc = inspect.getdoc(spec_function(hook))
    assert doc, f"hookspec {hook} has no docstring"
    positions = []
    for label in DOC_LABELS:
        match = re.search(rf"^{label}:\s*\S", doc, re.MULTILINE)
        assert match is not None, f"hookspec {hook} docstring lacks a '{label}:' paragraph"
        positions.append(match.start())
    assert positions == sorted(positions), f"hookspec {hook} paragraphs are out of order"


def test_hooks_doc_exists() -> None:
    assert (repo_root() / "docs" / "plugin-hooks.md").is_file()


def doc_headings() -> list[str]:
    path = repo_root() / "docs" / "plugin-hooks.md"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return re.findall(r"^### (\S+)\s*$", text, re.MULTILINE)


@pytest.mark.parametrize("hook", sorted(HOOK_NAMES))
def test_every_hook_has_a_heading_in_the_hooks_doc(hook: str) -> None:
    assert hook in doc_headings(), f"docs/plugin-hooks.md has no '### {hook}' heading"


def test_the_hooks_doc_documents_no_hook_that_does_not_exist() -> None:
    headings = doc_headings()
    assert headings, "docs/plugin-hooks.md has no '### <hook>' headings"
    assert set(headings) <= set(HOOK_NAMES)
    assert len(headings) == len(set(headings))


def other_test_sources() -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for path in sorted(TESTS_DIR.rglob("test_*.py"))
        if path.resolve() != Path(__file__).resolve()
    }


@pytest.mark.parametrize("hook", sorted(HOOK_NAMES))
def test_every_hook_is_implemented_by_a_plugin_in_some_other_test(hook: str) -> None:
    # A hook counts as tested when a test defines it (class form) or passes it to
    # define_oracle_plugin; naming it in a string or a comment does not count.
    implemented = re.compile(rf"\bdef {hook}\(|\b{hook}=")
    users = [path.name for path, text in other_test_sources().items() if implemented.search(text)]
    assert users, f"no test under {TESTS_DIR} implements the hook '{hook}'"
