"""The fixtures every test tree of the workspace shares (pytest reads ``pytest_plugins``
only from the root conftest)."""

pytest_plugins = ["oracle_server.testing.pytest_plugin"]
