"""Fixtures of the ucanto interoperability tests (UCAN-35, 36).

The JavaScript side is ``js/ucanto_bridge.mjs``, run with the ucanto versions pinned in
``js/package-lock.json``. ``npm ci`` installs them on first use (a fresh clone has no
``node_modules``). Node and npm are required: without them the tests fail, they never
skip, because these tests are the only proof of byte compatibility with ucanto.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from multiformats.cid import CID

from oracle_ucan.testing import NodeSetupError, node_with_locked_packages

JS_DIR = Path(__file__).parent / "js"
BRIDGE = JS_DIR / "ucanto_bridge.mjs"
BRIDGE_TIMEOUT = 60

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]
"""Runs a batch of bridge requests in one Node process; returns each ``ok`` value by id."""


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, after ``npm ci`` when the install is missing or stale."""
    try:
        return node_with_locked_packages(
            JS_DIR, code="interop", purpose="the ucanto interoperability tests"
        )
    except NodeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)


def _to_wire(value: object) -> object:
    if isinstance(value, bytes):
        return {"/": {"bytes": base64.b64encode(value).decode().rstrip("=")}}
    if isinstance(value, CID):
        return {"/": str(value)}
    raise TypeError(f"cannot send {type(value).__name__} to the ucanto bridge")


def _from_wire(value: dict[str, Any]) -> object:
    if len(value) == 1 and "/" in value:
        inner = value["/"]
        if isinstance(inner, str):
            return CID.decode(inner)
        if isinstance(inner, dict) and isinstance(inner.get("bytes"), str):
            text = inner["bytes"]
            return base64.b64decode(text + "=" * (-len(text) % 4))
    return value


@pytest.fixture(scope="session")
def ucanto(node: str) -> Ucanto:
    """Run bridge requests (see ``js/ucanto_bridge.mjs``) in one Node process.

    Bytes and CIDs in requests and responses are converted to and from their DAG-JSON
    forms. A request the bridge could not serve fails the test.
    """

    def run(requests: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [request["id"] for request in requests]
        assert len(set(ids)) == len(ids), "bridge request ids must be unique"
        done = subprocess.run(
            [node, str(BRIDGE)],
            cwd=JS_DIR,
            input=json.dumps(requests, default=_to_wire, ensure_ascii=False),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=BRIDGE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"ucanto bridge exited {done.returncode}:\n{done.stderr[-4000:]}")
        responses = json.loads(done.stdout, object_hook=_from_wire)
        failures = [f"{r['id']}: {r['error']}" for r in responses if "error" in r]
        if failures:
            pytest.fail("ucanto bridge failed:\n" + "\n".join(failures))
        return {response["id"]: response["ok"] for response in responses}

    return run


@pytest.fixture(scope="session")
def now() -> int:
    """One clock reading for the whole run: fixtures are minted against it, and the
    Python validators are given it as ``now``. ucanto's validator reads the real clock,
    so tokens it checks expire an hour or more after this."""
    return int(time.time())
