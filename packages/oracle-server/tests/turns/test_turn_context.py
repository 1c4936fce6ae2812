"""What a turn started on the runner puts on the runtime context: the session's room and
socket, the user's Matrix id (for every transport, not only HTTP)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from oracle_core import OraclePlugin, PluginContext, PluginManifest, PluginTool, RuntimeContext
from oracle_server import AuthData, create_oracle_app
from oracle_server.testing import OpenAIDouble, ToolCalls, TurnInput, follow_run, serving


class _NoArgs(BaseModel):
    pass


class ContextProbe(OraclePlugin):
    """A tool that records what its context says about the user and the session."""

    name = "probe"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Probe", summary="Probes.", when_to_use=["probe"], visibility="always"
    )

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        def probe(args: _NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            self.seen.append(
                {
                    "room": rt_ctx.session.room_id,
                    "ws": rt_ctx.session.ws_id,
                    "matrix_user": rt_ctx.user.matrix_user_id,
                    "client": rt_ctx.session.client,
                }
            )
            return "probed"

        return [PluginTool(name="probe", description="Probe.", args_schema=_NoArgs, handler=probe)]


async def test_the_turn_carries_room_socket_and_matrix_user(tmp_path: Path) -> None:
    probe = ContextProbe()
    async with OpenAIDouble([ToolCalls([("probe", {})]), "done"]) as llm:
        app = await create_oracle_app(
            {"name": "Probe Oracle"},
            plugins=[probe],
            env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path), **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app):
            did = "did:ixo:ixo1probe"
            session = await app.state.new_session(did)
            turn = await app.state.runner.start(
                TurnInput(
                    auth=AuthData(did),
                    session_id=session.session_id,
                    message="probe",
                    request_id=uuid.uuid4().hex,
                    client="matrix",
                    room_id="!room:example.org",
                    ws_id="sock-1",
                    matrix_user_id="@did-ixo-ixo1probe:example.org",
                )
            )
            async for _ in follow_run(app.state.runner.runs, turn.run_id, 0):
                pass

    assert turn.status == "finished"
    assert probe.seen == [
        {
            "room": "!room:example.org",
            "ws": "sock-1",
            "matrix_user": "@did-ixo-ixo1probe:example.org",
            "client": "matrix",
        }
    ]
