"""The local ``TurnTransport``: plugins' turns on the runtime itself, one at a time per
session, a session per room."""

from __future__ import annotations

from oracle_core import LocalTurnTransport, TransportTurn, UserInfo
from oracle_core.testing import ScriptedChatModel, create_test_runtime

USER = UserInfo(did="did:key:z6MkTransport")


async def test_turns_of_one_room_share_a_session_and_its_history() -> None:
    model = ScriptedChatModel(["First.", "Second.", "Elsewhere."])
    async with await create_test_runtime(plugins=[], model=model) as runtime:
        transport = runtime.runtime.ambient.transport
        assert isinstance(transport, LocalTurnTransport)
        one = await transport.run_turn(TransportTurn(user=USER, message="a", room_id="!r"))
        two = await transport.run_turn(TransportTurn(user=USER, message="b", room_id="!r"))
        other = await transport.run_turn(TransportTurn(user=USER, message="c"))
        thread = await runtime.runtime.thread_messages(USER.did, one.session_id)

    assert (one.status, one.text, two.text, other.text) == (
        "finished",
        "First.",
        "Second.",
        "Elsewhere.",
    )
    assert one.session_id == two.session_id != other.session_id
    assert [m.text for m in thread] == ["a", "First.", "b", "Second."]
