"""``on_session_event``: plugins hear of sessions created, titled and deleted."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from oracle_core import OraclePlugin, PluginManifest, RuntimeContext, SessionEvent
from oracle_core.testing import create_test_runtime

MANIFEST = PluginManifest(
    title="Listener", summary="Listens.", when_to_use=["never"], visibility="silent"
)


class Listener(OraclePlugin):
    version = "1.0.0"
    manifest = MANIFEST

    def __init__(self, name: str, *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.heard: list[tuple[SessionEvent, str, str, str | None]] = []

    async def on_session_event(self, event: SessionEvent, rt_ctx: RuntimeContext[Any]) -> None:
        self.heard.append((event, rt_ctx.user.did, rt_ctx.session.id, rt_ctx.plugin_name))
        if self.fail:
            raise RuntimeError("listener broke")


async def test_every_listener_hears_each_event_with_a_context_of_its_user() -> None:
    good, broken = Listener("good"), Listener("broken", fail=True)
    history = (HumanMessage("Hi"), AIMessage("Hello!"))
    async with await create_test_runtime(plugins=[broken, good]) as runtime:
        for event in (
            SessionEvent("session.created", "s1", "did:key:z6MkOwner", title="Untitled"),
            SessionEvent("session.title", "s1", "did:key:z6MkOwner", title="Greetings"),
            SessionEvent("session.deleted", "s1", "did:key:z6MkOwner", messages=history),
        ):
            await runtime.runtime.session_event(event)

    for listener in (good, broken):
        assert [e.kind for e, *_ in listener.heard] == [
            "session.created",
            "session.title",
            "session.deleted",
        ]
        assert {(did, sid) for _, did, sid, _ in listener.heard} == {("did:key:z6MkOwner", "s1")}
    assert {name for *_, name in good.heard} == {"good"}
    assert good.heard[1][0].payload() == {"sessionId": "s1", "title": "Greetings"}
    assert good.heard[2][0].messages == history
