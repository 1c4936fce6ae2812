"""The example oracle served over HTTP: what ``make run`` starts."""

from __future__ import annotations

import os
from collections.abc import Mapping

from example_oracle import example_plugins
from oracle_server import OracleApp, create_oracle_app

LOCAL_DEFAULTS = {
    "ORACLE_BACKEND": "local",
    "HOST": "127.0.0.1",
    "PORT": "3000",
    "SQLITE_DATABASE_PATH": "./data/sqlite",
    "NOTES_DATABASE_PATH": "./data/notes.sqlite",
}


async def create_app(env: Mapping[str, str] | None = None) -> OracleApp:
    """The example oracle; local defaults fill what the environment leaves unset.

    The installed plugin distributions join the example's own: in local mode each one
    that has an embedded backend (memory) runs on it, with no variable to set.
    """
    environment = {**LOCAL_DEFAULTS, **dict(os.environ if env is None else env)}
    return await create_oracle_app(
        {
            "name": "Example Oracle",
            "org": "the oracle runtime project",
            "description": "a small assistant that keeps notes and converts units",
        },
        plugins=example_plugins(),
        env=environment,
        require_llm=False,
    )
