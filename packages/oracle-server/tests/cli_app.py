"""An app factory for the CLI tests (``--app cli_app:create_app``)."""

from __future__ import annotations

from oracle_plugins.portal import PortalPlugin
from oracle_server import OracleApp, create_oracle_app


async def create_app() -> OracleApp:
    """A plain local oracle with one bundled plugin."""
    return await create_oracle_app(
        {"name": "Inspected Oracle"}, plugins=[PortalPlugin()], discover_entry_points=False
    )
