"""Fixtures of the server end-to-end tests: plugins, the model double, a served oracle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from oracle_core import OraclePlugin
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import ClockPlugin, OpenAIDouble, WeatherPlugin, serving

ServeFactory = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


@pytest.fixture
def base_env(tmp_path: Path, llm: OpenAIDouble) -> dict[str, str]:
    return {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "THROTTLE_LIMIT": "1000",
        # With REDIS_URL the count is shared by every test on that Redis within a minute.
        "SOCKET_HANDSHAKE_LIMIT": "1000",
        **llm.env(),
    }


@pytest.fixture
def serve(base_env: dict[str, str]) -> ServeFactory:
    """``async with serve(**env_overrides) as (app, base_url)``: a served oracle."""

    @asynccontextmanager
    async def run(
        plugins: list[OraclePlugin] | None = None, **overrides: str
    ) -> AsyncIterator[tuple[OracleApp, str]]:
        app = await create_oracle_app(
            {"name": "E2E Oracle"},
            plugins=plugins if plugins is not None else [ClockPlugin(), WeatherPlugin()],
            env={**base_env, **overrides},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app) as base_url:
            yield app, base_url

    return run
