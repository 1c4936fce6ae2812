"""The published wheels, not only the lock: metadata, typing marker and import paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))


def _uv() -> str:
    # `uv run` exports UV; `make test` always goes through it.
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.fail("uv not found: run the tests with `make test` (it installs uv)")
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    built: dict[str, Path] = {}
    for dist in DISTRIBUTIONS:
        name = tomllib.loads((dist / "pyproject.toml").read_text())["project"]["name"]
        subprocess.run(
            [_uv(), "build", "--wheel", "--package", name, "--out-dir", str(out), "--quiet"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        normalised = name.replace("-", "_")
        (wheel,) = out.glob(f"{normalised}-*.whl")
        built[name] = wheel
    return built


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(meta_name).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def test_every_distribution_builds(wheels: dict[str, Path]) -> None:
    assert "oracle-core" in wheels
    assert len(wheels) == len(DISTRIBUTIONS)


def test_core_wheel_is_typed_and_declares_its_dependencies(wheels: dict[str, Path]) -> None:
    names, fields = _metadata(wheels["oracle-core"])
    assert "oracle_core/py.typed" in names
    assert "oracle_core/hookspecs.py" in names
    requires = " ".join(fields.get("Requires-Dist", []))
    for dependency in (
        "pydantic",
        "pluggy",
        "langchain",
        "langgraph",
        "langgraph-checkpoint-sqlite",
    ):
        assert dependency in requires
    # Core and ucan release together: local mode matches capabilities with ucan's rule.
    assert "oracle-ucan==0.1.0" in requires
    # The py-multiformats import name must never be shadowed (see deps notes).
    assert "dag-cbor" not in requires
    assert fields["Requires-Python"] == [">=3.11"]


def test_ucan_wheel_depends_on_py_multiformats_only(wheels: dict[str, Path]) -> None:
    names, fields = _metadata(wheels["oracle-ucan"])
    assert "oracle_ucan/py.typed" in names
    requires = [r.split(";")[0].replace(" ", "") for r in fields.get("Requires-Dist", [])]
    names_only = {r.split("=")[0].split(">")[0].split("<")[0].split("!")[0] for r in requires}
    # The pure-Python multiformats and dag-cbor install the same import name and break it.
    assert "py-multiformats==0.4.0a1" in requires
    assert not names_only & {"multiformats", "dag-cbor", "multiformats-config", "oracle-core"}


def test_no_distribution_shadows_py_multiformats() -> None:
    from importlib.metadata import distributions

    installed = {(d.metadata["Name"] or "").lower() for d in distributions()}
    assert "py-multiformats" in installed
    assert not installed & {"multiformats", "dag-cbor", "multiformats-config"}


def test_each_wheel_owns_only_its_import_path(wheels: dict[str, Path]) -> None:
    for name, wheel in wheels.items():
        names, _ = _metadata(wheel)
        top_levels = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        # No distribution may ship the shared namespace's __init__.py.
        assert "oracle_plugins/__init__.py" not in names, name
        if name.startswith("oracle-plugins-"):
            assert top_levels == {"oracle_plugins"}, name
        else:
            assert top_levels == {name.replace("-", "_")}, name


def test_plugins_accept_any_core_of_the_same_major(wheels: dict[str, Path]) -> None:
    plugins = {name: wheel for name, wheel in wheels.items() if name.startswith("oracle-plugins-")}
    assert plugins
    for name, wheel in plugins.items():
        _, fields = _metadata(wheel)
        requires = [r.replace(" ", "") for r in fields.get("Requires-Dist", [])]
        runtime = [r.split(";")[0] for r in requires if r.startswith("oracle-")]
        # Core, server and ucan release together; a plugin works with any 0.x of them.
        assert "oracle-core<1,>=0.1" in runtime, (name, runtime)
        assert not [r for r in runtime if "==" in r], (name, runtime)


def test_the_server_wheel_ships_its_lua_scripts(wheels: dict[str, Path]) -> None:
    # Redis scripts live as .lua files beside the Python that loads them.
    source = ROOT / "packages/oracle-server/src"
    scripts = sorted(p.relative_to(source).as_posix() for p in source.rglob("*.lua"))
    names, _ = _metadata(wheels["oracle-server"])

    assert scripts
    assert sorted(n for n in names if n.endswith(".lua")) == scripts
