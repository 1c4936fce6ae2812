"""Session lifecycle events reach the plugins' ``on_session_event`` and every socket of
the user, in any of their sessions (a session list in another tab stays current)."""

from __future__ import annotations

from oracle_server.testing import SessionListener, StartOracle


async def test_created_titled_and_deleted_reach_plugins_and_every_socket_of_the_user(
    start_oracle: StartOracle,
) -> None:
    listener = SessionListener()
    oracle = await start_oracle(["Tides follow the moon."], plugins=[listener])
    user, stranger = oracle.new_user(), oracle.new_user()
    first = await oracle.create_session(user)
    other_tab = await oracle.connect(user, first)
    await other_tab.wait_for("connected")
    strangers_session = await oracle.create_session(stranger)
    strangers_tab = await oracle.connect(stranger, strangers_session)
    await strangers_tab.wait_for("connected")

    second = await oracle.create_session(user)
    reply = await oracle.send_message(user, second, "Why are there tides?")
    [titled] = await other_tab.wait_for("session.title")
    deleted = await oracle.http.delete(f"/sessions/{second}", headers=user.headers())
    [gone] = await other_tab.wait_for("session.deleted")

    assert reply.status_code == 200, reply.text
    assert deleted.status_code == 200, deleted.text
    assert other_tab.records.named("session.created") == [
        {"sessionId": second, "title": "Untitled"}
    ]
    assert titled == {"sessionId": second, "title": "Why are there tides"}
    assert gone == {"sessionId": second}
    assert strangers_tab.records.named("session.created") == []
    assert strangers_tab.records.named("session.title") == []
    mine = [h for h in listener.heard if h[1] == second]
    assert [(kind, did, title) for kind, _, did, title, _ in mine] == [
        ("session.created", user.did, "Untitled"),
        ("session.title", user.did, "Why are there tides"),
        ("session.deleted", user.did, None),
    ]
    assert mine[-1][4] == ["Why are there tides?", "Tides follow the moon."]
