"""Test support for interoperability with JavaScript: Node and pinned npm packages.

The interop tests (ucanto here; the socket.io client and the client SDK in
``oracle-server``'s tests) each keep a ``package.json`` and ``package-lock.json`` beside
their scripts. ``node_with_locked_packages`` checks Node and runs ``npm ci`` there when
``node_modules`` is missing or differs from the lockfile; a missing or old Node, or a
failed install, raises ``NodeSetupError``, which the tests' fixtures turn into a failure,
never a skip: these tests are the only proof of compatibility with the JS stacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["NODE_MAJOR", "NodeSetupError", "node_with_locked_packages"]

NODE_MAJOR = 20
"""The oldest Node major version the interop scripts run on."""

NPM_CI_TIMEOUT = 300
"""Seconds ``npm ci`` may take."""


class NodeSetupError(RuntimeError):
    """Node or the pinned packages are not usable; the message starts with a stable code."""


def _tool(name: str, code: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise NodeSetupError(
            f"{code}.node_missing: `{name}` is not on PATH; {purpose} need "
            f"Node {NODE_MAJOR}+ and npm (.ci/run installs them)"
        )
    return path


def _locked_packages(lockfile: Path) -> dict[str, tuple[object, object]] | None:
    try:
        packages = json.loads(lockfile.read_text())["packages"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {
        name: (entry.get("version"), entry.get("integrity"))
        for name, entry in packages.items()
        if name  # "" is the project itself, absent from the installed tree's lockfile
    }


def _install_is_current(js_dir: Path) -> bool:
    """Whether ``node_modules`` holds exactly what ``package-lock.json`` pins."""
    lock = js_dir / "package-lock.json"
    installed = js_dir / "node_modules" / ".package-lock.json"
    if not installed.is_file() or installed.stat().st_mtime < lock.stat().st_mtime:
        return False
    wanted = _locked_packages(lock)
    return wanted is not None and wanted == _locked_packages(installed)


def node_with_locked_packages(js_dir: Path, *, code: str, purpose: str) -> str:
    """The ``node`` executable, after ``npm ci`` in ``js_dir`` when its install is stale.

    Args:
        js_dir: The folder with ``package.json`` and ``package-lock.json``.
        code: Prefix of the failure codes (``<code>.node_missing``, ``.node_too_old``,
            ``.npm_ci_failed``).
        purpose: What needs Node, for the failure message ("the ucanto interoperability
            tests").

    Returns:
        The path of ``node``.

    Raises:
        NodeSetupError: Node or npm missing, Node too old, or ``npm ci`` failed.
    """
    node_path = _tool("node", code, purpose)
    npm_path = _tool("npm", code, purpose)
    version = subprocess.run(
        [node_path, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    major = version.lstrip("v").split(".", 1)[0]
    if not major.isdigit() or int(major) < NODE_MAJOR:
        raise NodeSetupError(f"{code}.node_too_old: Node {version!r}; need {NODE_MAJOR}+")
    if not _install_is_current(js_dir):
        env = {**os.environ, "npm_config_update_notifier": "false"}
        done = subprocess.run(
            [npm_path, "ci", "--no-audit", "--no-fund"],
            cwd=js_dir,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise NodeSetupError(
                f"{code}.npm_ci_failed: `npm ci` in {js_dir} exited {done.returncode}:\n"
                f"{done.stderr[-4000:]}"
            )
    return node_path
