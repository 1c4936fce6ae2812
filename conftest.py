"""What every test tree of the workspace shares.

- The server kit's fixtures (pytest reads ``pytest_plugins`` only from the root conftest).
- Core's check that no test logs a secret or a user's message (``no_secrets_in_logs``).
- The Hypothesis profiles: ``ci`` (the default, a few hundred examples a test) and
  ``chaos`` (long runs: ``make chaos``), chosen with ``HYPOTHESIS_PROFILE``.
- A check at the end of the run: a socket, asyncio transport, event loop, child process
  or SQLite connection still open once every test has finished fails the run. Held by
  something long-lived, it would warn (``ResourceWarning``) only at interpreter exit,
  where no warning filter can fail anything.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from oracle_server.testing import UnclosedResource, unclosed_resources

pytest_plugins = ["oracle_core.testing.pytest_plugin", "oracle_server.testing.pytest_plugin"]

# Tests that pin their own ``max_examples`` keep it; the others follow the profile.
settings.register_profile("ci", max_examples=200, deadline=None, database=None)
settings.register_profile("chaos", max_examples=2_000, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_UNCLOSED = pytest.StashKey[list[UnclosedResource]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when resources are left open (fixtures are torn down by now)."""
    unclosed = unclosed_resources()
    session.config.stash[_UNCLOSED] = unclosed
    if unclosed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List what was left open, and what holds it."""
    unclosed = terminalreporter.config.stash.get(_UNCLOSED, [])
    if unclosed:
        terminalreporter.section("resources left open at the end of the run", red=True)
        for resource in unclosed:
            terminalreporter.line(str(resource))
