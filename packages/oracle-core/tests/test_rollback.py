"""``OracleRuntime.rollback_last_turn``: the thread goes back to before its latest turn."""

from __future__ import annotations

from oracle_core.testing import ScriptedChatModel, create_test_runtime


async def test_the_latest_turn_is_discarded_and_the_earlier_ones_kept() -> None:
    model = ScriptedChatModel(["First answer.", "Second answer.", "Third answer."])
    async with await create_test_runtime(plugins=[], model=model) as runtime:
        core, did, thread = runtime.runtime, runtime.user.did, runtime.session.id
        await runtime.run_turn("first")
        await runtime.run_turn("second")

        assert await core.rollback_last_turn(did, thread) is True
        after = [m.text for m in await core.thread_messages(did, thread)]
        third = await runtime.run_turn("third")
        final = [m.text for m in await core.thread_messages(did, thread)]

    assert after == ["first", "First answer."]
    assert third.text == "Third answer."
    assert final == ["first", "First answer.", "third", "Third answer."]


async def test_a_first_turn_rolled_back_leaves_no_thread() -> None:
    async with await create_test_runtime(
        plugins=[], model=ScriptedChatModel(["Hello."])
    ) as runtime:
        core, did, thread = runtime.runtime, runtime.user.did, runtime.session.id
        nothing = await core.rollback_last_turn(did, thread)
        await runtime.run_turn("hi")
        rolled = await core.rollback_last_turn(did, thread)

        assert nothing is False
        assert rolled is True
        assert await core.thread_messages(did, thread) == []
