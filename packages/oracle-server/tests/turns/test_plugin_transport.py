"""A plugin starts turns through ``ctx.transport`` (Slack messages, scheduled tasks,
group rooms) and they run as an HTTP turn does: session rows, the runner and its run
log, the double-texting policy, the subscription gate and the turn budget."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from oracle_core import (
    OracleError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    TransportTurn,
    TurnBusyError,
    TurnTransport,
    UserInfo,
)
from oracle_server import AuthData, create_oracle_app
from oracle_server._errors import HTTPError
from oracle_server.testing import OpenAIDouble, Paced, Step, serving

USER = UserInfo(did="did:ixo:ixo1transport", matrix_user_id="@did-ixo-ixo1transport:hs")


class Listener(OraclePlugin):
    """Keeps the transport its lifespan was given, as a chat listener would."""

    name = "listener"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Listener", summary="Listens.", when_to_use=["never"], visibility="silent"
    )

    def __init__(self) -> None:
        self.transport: TurnTransport | None = None

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[Any]) -> AsyncIterator[None]:
        self.transport = ctx.transport
        yield


async def _app(tmp_path: Path, llm: OpenAIDouble, **kwargs: Any) -> Any:
    return await create_oracle_app(
        {"name": "Transport Oracle"},
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            "THROTTLE_LIMIT": "1000",
            **llm.env(),
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
        **kwargs,
    )


async def test_a_plugins_turn_gets_a_session_of_its_room_and_runs_on_the_runner(
    tmp_path: Path,
) -> None:
    listener = Listener()
    async with OpenAIDouble(["Hello from Slack.", "Still here."]) as llm:
        app = await _app(tmp_path, llm, plugins=[listener])
        async with serving(app):
            transport = listener.transport
            assert transport is not None
            first = await transport.run_turn(
                TransportTurn(user=USER, message="hi", room_id="C123", client="slack")
            )
            second = await transport.run_turn(
                TransportTurn(user=USER, message="again", room_id="C123", client="slack")
            )
            record = await app.state.sessions.get(USER.did, first.session_id)
            info = await app.state.runner.runs.info(first.run_id)
            again = await transport.session_for_room(USER, "C123", client="slack")

    assert (first.status, first.text) == ("finished", "Hello from Slack.")
    assert second.session_id == first.session_id == again
    assert second.text == "Still here."
    # The second turn saw the first: one conversation per room.
    assert any(m.get("content") == "Hello from Slack." for m in llm.requests[1].messages)
    assert record is not None
    assert (record.room_id, record.client, record.title) == ("C123", "slack", "hi")
    assert info is not None
    assert info.session_id == first.session_id


async def test_the_sessions_policy_and_the_gates_hold_for_plugin_turns(tmp_path: Path) -> None:
    listener = Listener()
    refused: set[str] = set()

    async def gate(auth: AuthData) -> None:
        if auth.did in refused:
            raise HTTPError(402, "Subscription required")

    steps: list[Step] = [Paced("slow answer " * 30, between_chunks=0.02), "second"]
    async with OpenAIDouble(steps, chunk_size=8) as llm:
        app = await create_oracle_app(
            {"name": "Transport Oracle"},
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path),
                "THROTTLE_LIMIT": "1000",
                "SESSION_CONCURRENCY_POLICY": "reject",
                **llm.env(),
            },
            plugins=[listener],
            subscription_check=gate,
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app):
            transport = listener.transport
            assert transport is not None
            session = await app.state.new_session(USER.did)
            running = asyncio.create_task(
                transport.run_turn(
                    TransportTurn(user=USER, message="one", session_id=session.session_id)
                )
            )
            async with asyncio.timeout(10):
                while not llm.requests:  # noqa: ASYNC110 - polling the double's log
                    await asyncio.sleep(0.005)
            with pytest.raises(TurnBusyError):
                await transport.run_turn(
                    TransportTurn(user=USER, message="two", session_id=session.session_id)
                )
            await running
            refused.add(USER.did)
            with pytest.raises(OracleError) as gated:
                await transport.run_turn(
                    TransportTurn(user=USER, message="three", session_id=session.session_id)
                )

    assert gated.value.code == "subscription.required"
    assert len(llm.requests) == 1
