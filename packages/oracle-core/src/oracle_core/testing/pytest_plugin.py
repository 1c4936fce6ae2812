"""Pytest plugin of core's testing kit: no test may log a secret or a user's message.

Activate it with ``pytest_plugins = ["oracle_core.testing.pytest_plugin"]`` in a test
suite's root ``conftest.py`` (this repository's does). It attaches a
:class:`~oracle_core.testing.LogScan` to the root logger for the whole run, with the root
level at ``INFO`` unless the run asks for more (``--log-level``), and after each test —
its fixtures torn down — fails the test when a record held a value the kit marked
sensitive (:func:`~oracle_core.testing.mark_sensitive`) or the shape of a credential
(:data:`~oracle_core.testing.SECRET_PATTERNS`). A report names the logger and the kind
of leak, never the whole secret.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from oracle_core.testing._secrets import LogScan

__all__ = ["no_secrets_in_logs"]

_SCAN = pytest.StashKey[LogScan]()


def pytest_configure(config: pytest.Config) -> None:
    """Attach the scan to the root logger for the run."""
    scan = LogScan()
    config.stash[_SCAN] = scan
    root = logging.getLogger()
    root.addHandler(scan)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Detach the scan."""
    scan = config.stash.get(_SCAN, None)
    if scan is not None:
        logging.getLogger().removeHandler(scan)


@pytest.fixture(autouse=True)
def no_secrets_in_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it, or one of its fixtures, logged a secret or a user's message.

    Autouse and set up first, so it is torn down last: what other fixtures log while
    they close is read too. A test that logs a secret on purpose (to test redaction, say)
    marks itself ``@pytest.mark.logs_secrets``.
    """
    scan = request.config.stash[_SCAN]
    scan.clear()
    yield
    leaks = scan.leaks()
    scan.clear()
    if leaks and request.node.get_closest_marker("logs_secrets") is None:
        lines = "\n".join(f"  {leak}" for leak in leaks[:10])
        pytest.fail(f"secrets.logged: the logs of this test hold\n{lines}", pytrace=False)
