"""The Synapse virtualenv of the tests: built once with uv, with a configuration template.

Synapse runs in a virtualenv of its own, kept apart from the workspace's because its
pinned dependencies are not ours. `ensure_synapse_venv` builds it once, together with a
configuration template made by ``--generate-config``, and reuses both afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "SERVER_NAME",
    "SYNAPSE_VERSION",
    "VENV_ENV_VAR",
    "SynapseError",
    "config_template",
    "ensure_synapse_venv",
]

SYNAPSE_VERSION = "1.163.2"
"""The matrix-synapse release installed by `ensure_synapse_venv`."""

VENV_ENV_VAR = "ORACLE_SYNAPSE_VENV"
"""Environment variable naming the directory of the Synapse virtualenv (overrides the default)."""

_READY_MARKER = ".oracle-synapse-ready"
_TEMPLATE_DIR = "oracle-template"
SERVER_NAME = "localhost"
_INSTALL_TIMEOUT = 600.0
_GENERATE_TIMEOUT = 120.0


# The generated config is YAML; the workspace does not depend on a YAML parser, Synapse's
# virtualenv has one. JSON is YAML, so configs are written back as JSON.
_YAML_TO_JSON = (
    "import json, sys, yaml\n"
    "with open(sys.argv[1]) as src, open(sys.argv[2], 'w') as dst:\n"
    "    json.dump(yaml.safe_load(src), dst, indent=1)\n"
)


class SynapseError(RuntimeError):
    """A homeserver that could not be installed, started or used.

    The message starts with a stable code (``synapse.start_failed: …``) and ends with a
    hint; failures of the process carry the tail of its log.

    Attributes:
        code: The stable code, e.g. ``synapse.register_rejected``.
        errcode: The Matrix ``errcode`` of a refused request (``M_USER_IN_USE``), else None.
    """

    def __init__(self, code: str, message: str, *, errcode: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.errcode = errcode


def ensure_synapse_venv(cache_dir: Path | None = None) -> Path:
    """Build, once, a virtualenv with ``matrix-synapse`` pinned to `SYNAPSE_VERSION`.

    The virtualenv is made with uv (``uv venv -p 3.11``, ``uv pip install``), together with
    a configuration template from Synapse's ``--generate-config``. A ready marker is
    written last, so an interrupted build is redone; a file lock next to the directory lets
    concurrent test processes share one build.

    Args:
        cache_dir: Where the virtualenv lives. Default: ``$ORACLE_SYNAPSE_VENV`` if set,
            else ``<repo root>/.tools/synapse-<version>`` (``~/.cache/oracle-server/…``
            outside a checkout). The directory belongs to this helper: without its ready
            marker it is replaced.

    Returns:
        The virtualenv's ``python``.

    Raises:
        SynapseError: uv is missing, or the install or the config generation failed.
    """
    venv = (cache_dir or _default_venv_dir()).absolute()
    python = venv / "bin" / "python"
    if _is_ready(venv):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _locked(venv.with_name(venv.name + ".lock")):
        if _is_ready(venv):  # built by another process while this one waited
            return python
        uv = _find_uv()
        _run(
            [uv, "venv", "--clear", "--quiet", "--python", "3.11", str(venv)],
            "synapse.venv_failed",
            _INSTALL_TIMEOUT,
        )
        _run(
            [
                uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(python),
                f"matrix-synapse=={SYNAPSE_VERSION}",
            ],
            "synapse.install_failed",
            _INSTALL_TIMEOUT,
        )
        _generate_template(python, venv / _TEMPLATE_DIR)
        (venv / _READY_MARKER).write_text(SYNAPSE_VERSION + "\n")
    return python


def _default_venv_dir() -> Path:
    override = os.environ.get(VENV_ENV_VAR)
    if override:
        return Path(override)
    root = _repo_root()
    if root is None:
        return Path.home() / ".cache" / "oracle-server" / f"synapse-{SYNAPSE_VERSION}"
    return root / ".tools" / f"synapse-{SYNAPSE_VERSION}"


def _repo_root() -> Path | None:
    """The nearest directory holding ``uv.lock`` above this file, else above the cwd."""
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for directory in (start, *start.parents):
            if (directory / "uv.lock").is_file():
                return directory
    return None


def _find_uv() -> str:
    candidates = [os.environ.get("UV"), "uv"]
    root = _repo_root()
    if root is not None:
        candidates.append(str(root / ".tools" / "bin" / "uv"))
    for candidate in candidates:
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    raise SynapseError(
        "synapse.uv_missing",
        "uv was not found ($UV, PATH, <repo root>/.tools/bin/uv); "
        "run `make setup` to install it into .tools/",
    )


def _is_ready(venv: Path) -> bool:
    try:
        return (venv / _READY_MARKER).read_text().strip() == SYNAPSE_VERSION
    except OSError:
        return False


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], code: str, timeout: float, cwd: Path | None = None) -> None:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SynapseError(code, f"`{' '.join(command)}` took over {timeout:.0f} s") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise SynapseError(
            code,
            f"`{' '.join(command)}` exited with {done.returncode}:\n{output}\n"
            "(a package registry must be reachable on the first run)",
        )


def _generate_template(python: Path, template: Path) -> None:
    """Run ``--generate-config`` into ``template``; keep its config also as JSON."""
    shutil.rmtree(template, ignore_errors=True)
    template.mkdir(parents=True)
    _run(
        [
            str(python),
            "-m",
            "synapse.app.homeserver",
            "--server-name",
            SERVER_NAME,
            "--config-path",
            str(template / "homeserver.yaml"),
            "--generate-config",
            "--report-stats=no",
        ],
        "synapse.generate_config_failed",
        _GENERATE_TIMEOUT,
        cwd=template,
    )
    _run(
        [
            str(python),
            "-c",
            _YAML_TO_JSON,
            str(template / "homeserver.yaml"),
            str(template / "homeserver.json"),
        ],
        "synapse.generate_config_failed",
        _GENERATE_TIMEOUT,
    )


def config_template(python: Path) -> Path:
    """The directory of the configuration template beside ``python``'s virtualenv
    (``homeserver.json`` and the signing key), generated if it is missing."""
    template = python.parent.parent / _TEMPLATE_DIR
    if not (template / "homeserver.json").is_file():
        with _locked(template.with_name(template.name + ".lock")):
            if not (template / "homeserver.json").is_file():
                _generate_template(python, template)
    return template
