"""Preferences in the user's room on a real Synapse, through an ixo-mode oracle node.

The node runs the real Matrix layer (matrix-nio): the first turn makes it create the
user's room; a legacy-format ``user_prefs`` event, as the older TypeScript writer left
it, is put there; ``GET /user-preferences`` answers it; a turn calls
``set_user_preferences``, and the user's own Matrix client reads the new state event
back and decodes it; the next turn's prompt carries the change.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import nio
import pytest

from oracle_plugins.user_preferences import (
    STATE_EVENT_TYPE,
    STATE_KEY,
    TOOL_NAME,
    UserPreferencesPlugin,
    decode_content,
)
from oracle_server.testing import (
    ENTITY_DID,
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    ToolCalls,
    eventually,
    matrix_user,
    node_env,
    oracle_node,
    user_headers,
    user_room_alias,
)
from oracle_ucan import Ed25519Signer

# What the TypeScript runtime's first state manager stored: the superjson text itself,
# `updatedAt` a JS Date (superjson 2.2.7 output, see test_user_preferences_codec.py).
LEGACY_DATA = (
    '{"json":{"agentName":"Sage","language":"fr","tone":"dry","formality":"formal",'
    '"customInstructions":"Cite sources.","updatedAt":"2024-03-02T01:02:03.456Z"},'
    '"meta":{"values":{"updatedAt":["Date"]},"v":1}}'
)
LEGACY_RECORD = {
    "agentName": "Sage",
    "language": "fr",
    "tone": "dry",
    "formality": "formal",
    "customInstructions": "Cite sources.",
    "updatedAt": "2024-03-02T01:02:03.456Z",
}


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


async def put_state_as(
    synapse: Synapse, access_token: str, room_id: str, content: dict[str, Any]
) -> None:
    """Write the ``user_prefs`` state event with a Matrix oracle_account's own token."""
    path = (
        f"/_matrix/client/v3/rooms/{quote(room_id)}/state/"
        f"{quote(STATE_EVENT_TYPE)}/{quote(STATE_KEY)}"
    )
    async with httpx.AsyncClient(base_url=synapse.base_url) as http:
        answer = await http.put(
            path, json=content, headers={"Authorization": f"Bearer {access_token}"}
        )
        answer.raise_for_status()


async def test_preferences_live_in_the_users_room_state(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    llm.add_steps(
        "Hello.",
        ToolCalls([(TOOL_NAME, {"language": "pt-BR", "tone": ""})]),
        "Feito.",
        "De nada.",
    )
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env, plugins=[UserPreferencesPlugin()]) as (_app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=60) as http,
    ):
        # No room with the oracle yet: nothing to read, and the tool is not offered.
        assert (await http.get("/user-preferences")).json() is None
        session = (await http.post("/sessions")).json()["sessionId"]
        first = await http.post(f"/messages/{session}", json={"message": "hello"})
        assert first.status_code == 200, first.text
        assert TOOL_NAME not in llm.requests[0].tool_names

        # The chat log creates the user's room after the reply; the user joins it.
        alias = user_room_alias(user.did(), ENTITY_DID, synapse.server_name)

        async def resolved() -> str | None:
            answer = await client.room_resolve_alias(alias)
            return answer.room_id if isinstance(answer, nio.RoomResolveAliasResponse) else None

        room_id: str = await eventually(resolved)

        async def joined() -> bool:
            return isinstance(await client.join(room_id), nio.JoinResponse)

        await eventually(joined)

        # The older runtime (same oracle oracle_account) left its preferences uncompressed.
        await put_state_as(synapse, oracle_account.bot.access_token, room_id, {"data": LEGACY_DATA})
        assert (await http.get("/user-preferences")).json() == LEGACY_RECORD

        second = await http.post(
            f"/messages/{session}", json={"message": "Fala português, sem tom especial"}
        )
        assert second.status_code == 200, second.text
        assert second.json()["message"]["content"] == "Feito."
        asked = llm.requests[1]
        assert TOOL_NAME in asked.tool_names
        prompt = asked.system_prompt
        assert prompt is not None
        assert prompt.startswith("You are Sage.")
        assert "- Language: fr\n- Tone: dry\n- Formality: formal" in prompt

        # The user's own client reads the new state event from the homeserver.
        state = await client.room_get_state_event(room_id, STATE_EVENT_TYPE, STATE_KEY)
        assert isinstance(state, nio.RoomGetStateEventResponse), state
        data = state.content["data"]
        base64.b64decode(data, validate=True)  # the compressed form replaced the legacy one
        stored = decode_content(state.content)
        assert stored == {
            "agentName": "Sage",
            "language": "pt-BR",
            "formality": "formal",
            "customInstructions": "Cite sources.",
            "updatedAt": stored["updatedAt"],
        }
        assert stored["updatedAt"] > LEGACY_RECORD["updatedAt"]
        assert (await http.get("/user-preferences")).json() == stored

        third = await http.post(f"/messages/{session}", json={"message": "Obrigado"})
        assert third.status_code == 200, third.text
        prompt = llm.requests[-1].system_prompt
        assert prompt is not None
        assert "- Language: pt-BR" in prompt
        assert "- Tone:" not in prompt
        assert json.dumps(stored, ensure_ascii=False) in "".join(
            str(m.get("content")) for m in llm.requests[2].messages if m.get("role") == "tool"
        )
