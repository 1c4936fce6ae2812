"""``oracle_ucan.testing``: the Node setup the JavaScript interop tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle_ucan.testing import NodeSetupError, node_with_locked_packages


def test_missing_node_is_an_error_with_a_stable_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(NodeSetupError, match=r"^demo\.node_missing: `node` is not on PATH"):
        node_with_locked_packages(tmp_path, code="demo", purpose="the demo tests")


def test_a_failed_install_is_an_error_with_npm_output(tmp_path: Path) -> None:
    # No package.json: `npm ci` refuses, and nothing counts as installed.
    (tmp_path / "package-lock.json").write_text("{}")

    with pytest.raises(NodeSetupError, match=r"^demo\.npm_ci_failed: `npm ci` in "):
        node_with_locked_packages(tmp_path, code="demo", purpose="the demo tests")
