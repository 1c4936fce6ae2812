"""The plugin in a test runtime (``create_test_runtime``) over the recording Matrix fake."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from oracle_core import UserInfo
from oracle_core.testing import (
    RecordingMatrixService,
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_plugins.user_preferences import (
    STATE_EVENT_TYPE,
    STATE_KEY,
    TOOL_NAME,
    UserPreferencesPlugin,
    decode_content,
    encode_content,
    plugin,
)

USER = UserInfo(did="did:key:z6MkUserPreferencesTestUser", timezone="UTC")
ROOM = "!prefs-room:localhost"
SLOT = (ROOM, STATE_EVENT_TYPE, STATE_KEY)
# The TypeScript runtime's legacy form: superjson text in `data`, `updatedAt` a Date
# (produced by superjson 2.2.7, see test_user_preferences_codec.py).
LEGACY = {
    "data": (
        '{"json":{"agentName":"Sage","language":"fr","tone":"dry","formality":"formal",'
        '"customInstructions":"Cite sources.","updatedAt":"2024-03-02T01:02:03.456Z"},'
        '"meta":{"values":{"updatedAt":["Date"]},"v":1}}'
    )
}
LEGACY_SECTION = (
    "## User Preferences\n- Your name: Sage\n- Language: fr\n- Tone: dry\n- Formality: formal\n"
    "- Their instructions: Cite sources."
)


async def runtime(
    model: ScriptedChatModel | None = None,
    *,
    stored: dict[str, Any] | None = None,
    with_room: bool = True,
    prefs: UserPreferencesPlugin | None = None,
    oracle: dict[str, Any] | None = None,
) -> TestRuntime:
    rt = await create_test_runtime(
        plugins=[prefs or UserPreferencesPlugin()],
        model=model,
        user=USER,
        oracle=oracle,
    )
    if with_room:
        rt.matrix.user_rooms[USER.did] = ROOM
    if stored is not None:
        rt.matrix.state_events[SLOT] = stored
    return rt


def stored_record(matrix: RecordingMatrixService) -> dict[str, Any]:
    content = matrix.state_events[SLOT]
    assert set(content) == {"data"}
    assert not content["data"].startswith("{")  # the compressed form, not the legacy one
    record: dict[str, Any] = decode_content(content)
    return record


async def test_passes_the_conformance_suite_with_its_entry_point() -> None:
    report = await validate_plugin(plugin, entry_point=True)
    assert report.ok, str(report)
    names = [check.name for check in report.checks]
    assert "entry point" in names
    assert "manifest rules" in names  # soft warnings included: none allowed


async def test_without_a_room_nothing_is_bound_or_hydrated() -> None:
    async with await runtime(with_room=False) as rt:
        built = await rt.build("hello")
        assert TOOL_NAME not in built.tool_infos
        assert built.input["user_preferences"] is None
        assert "## User Preferences" not in built.prompt.text
        assert not built.degraded


async def test_legacy_preferences_hydrate_the_state_and_the_prompt() -> None:
    model = ScriptedChatModel([reply("Bonjour.")])
    async with await runtime(model, stored=LEGACY) as rt:
        result = await rt.run_turn("Salut")
        assert result.state["user_preferences"] == {
            "agent_name": "Sage",
            "language": "fr",
            "tone": "dry",
            "formality": "formal",
            "custom_instructions": "Cite sources.",
            "updated_at": "2024-03-02T01:02:03.456Z",
        }
        prompt = model.calls[0].system_prompt
        assert prompt is not None
        assert LEGACY_SECTION in prompt
        # agentName replaces the configured name in the identity line the model reads.
        assert prompt.startswith("You are Sage.")
        assert "Test Oracle" not in prompt
        assert TOOL_NAME in model.calls[0].tool_names


async def test_agent_name_replaces_the_name_throughout_an_operator_opening() -> None:
    model = ScriptedChatModel([reply("Hi.")])
    oracle = {
        "name": "Ada",
        "prompt": {"opening": "You are Ada. Ada helps with research; Adaline is her cat."},
    }
    async with await runtime(
        model, stored=encode_content({"agentName": "Nova"}), oracle=oracle
    ) as rt:
        await rt.run_turn("hi")
        prompt = model.calls[0].system_prompt
        assert prompt is not None
        assert prompt.startswith("You are Nova. Nova helps with research; Adaline is her cat.")
        assert "- Your name: Nova" in prompt
        # The core prompt itself carries the name (no middleware rewrites the model call).
        built = await rt.build("again")
        assert built.prompt.sections[0].text == (
            "You are Nova. Nova helps with research; Adaline is her cat."
        )
        assert "user-preferences" not in {b.name for b in rt.runtime.booted if b.middlewares}


async def test_the_tool_merges_writes_the_compressed_form_and_applies_from_the_next_message() -> (
    None
):
    model = ScriptedChatModel(
        [
            call_tool(
                TOOL_NAME,
                {"language": "pt-BR", "customInstructions": "Cite sources. Use metric units."},
            ),
            reply("Feito."),
            reply("Olá!"),
        ]
    )
    async with await runtime(model, stored={**LEGACY}) as rt:
        before = datetime.now(UTC)
        first = await rt.run_turn("Fala português comigo, e usa unidades métricas")
        (message,) = first.tool_messages(TOOL_NAME)
        assert isinstance(message.content, str)
        prefix = "Updated. New preferences: "
        assert message.content.startswith(prefix)
        returned = json.loads(message.content.removeprefix(prefix))
        record = stored_record(rt.matrix)
        assert returned == record
        assert record == {
            "agentName": "Sage",
            "language": "pt-BR",
            "tone": "dry",
            "formality": "formal",
            "customInstructions": "Cite sources. Use metric units.",
            "updatedAt": record["updatedAt"],
        }
        stamped = datetime.fromisoformat(record["updatedAt"].replace("Z", "+00:00"))
        assert before - timedelta(seconds=1) <= stamped <= datetime.now(UTC)
        assert record["updatedAt"].endswith("Z")
        assert len(record["updatedAt"]) == 24
        # Same turn: the prompt is the one built before the change.
        after_tool = model.calls[1].system_prompt
        assert after_tool is not None
        assert "- Language: fr" in after_tool

        await rt.run_turn("Obrigado")
        next_prompt = model.calls[2].system_prompt
        assert next_prompt is not None
        assert "- Language: pt-BR" in next_prompt
        assert "- Their instructions: Cite sources. Use metric units." in next_prompt


async def test_an_empty_string_clears_a_field_and_unknown_fields_survive() -> None:
    stored = encode_content({"agentName": "Sage", "tone": "dry", "userName": "Ana"})
    async with await runtime(stored=stored) as rt:
        # Empty string clears; null (models that send every property) leaves a field be.
        result = await rt.invoke_tool(
            TOOL_NAME, {"agentName": "", "formality": "casual", "tone": None}
        )
        assert isinstance(result, str)
        assert result.startswith("Updated.")
        record = stored_record(rt.matrix)
        assert record == {
            "tone": "dry",
            "userName": "Ana",
            "formality": "casual",
            "updatedAt": record["updatedAt"],
        }
        built = await rt.build("next")
        assert built.input["user_preferences"] == {
            "tone": "dry",
            "formality": "casual",
            "updated_at": record["updatedAt"],
        }
        assert built.prompt.text.startswith("You are Test Oracle.")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"formality": "posh"}, "formality"),
        ({"agentName": "x" * 81}, "agentName"),
        ({"language": "x" * 21}, "language"),
        ({"customInstructions": "x" * 2001}, "customInstructions"),
        ({"nickname": "Bo"}, "nickname"),
        ({}, "set at least one of agentName"),
        ({"agentName": None, "tone": None}, "set at least one of agentName"),
    ],
)
async def test_bad_arguments_are_refused_with_the_field_named(
    args: dict[str, Any], problem: str
) -> None:
    async with await runtime() as rt:
        with pytest.raises(ValidationError, match=problem):
            await rt.invoke_tool(TOOL_NAME, args)
        assert SLOT not in rt.matrix.state_events


async def test_a_bad_call_in_a_turn_becomes_an_error_the_model_can_fix() -> None:
    model = ScriptedChatModel(
        [
            call_tool(TOOL_NAME, {"formality": "posh"}),
            call_tool(TOOL_NAME, {"formality": "formal"}),
            reply("Done."),
        ]
    )
    async with await runtime(model) as rt:
        result = await rt.run_turn("Be posh from now on")
        refused, accepted = result.tool_messages(TOOL_NAME)
        assert refused.status == "error"
        assert "formality" in str(refused.content)
        assert str(accepted.content).startswith("Updated.")
        assert stored_record(rt.matrix)["formality"] == "formal"


async def test_unreadable_stored_preferences_are_treated_as_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbage = {"data": "secret-looking garbage that is no format"}
    model = ScriptedChatModel([reply("Hi.")])
    async with await runtime(model, stored=garbage) as rt:
        with caplog.at_level(logging.WARNING):
            result = await rt.run_turn("hello")
        assert result.state["user_preferences"] is None
        prompt = model.calls[0].system_prompt
        assert prompt is not None
        assert "- Your name:" not in prompt
        warnings = [r.getMessage() for r in caplog.records if "preferences" in r.getMessage()]
        assert warnings
        assert all("garbage" not in text for text in warnings)
        # A write replaces the unreadable record.
        assert (await rt.invoke_tool(TOOL_NAME, {"tone": "calm"})).startswith("Updated.")
        assert stored_record(rt.matrix)["tone"] == "calm"


async def test_reads_are_cached_per_room_and_the_tool_reads_fresh_and_invalidates() -> None:
    async with await runtime(stored=encode_content({"agentName": "Sage"})) as rt:
        first = await rt.build("one")
        assert first.input["user_preferences"]["agent_name"] == "Sage"
        # Another writer (the portal, another replica) changes the room state.
        rt.matrix.state_events[SLOT] = encode_content({"agentName": "Other"})
        cached = await rt.build("two")
        assert cached.input["user_preferences"]["agent_name"] == "Sage"
        # The tool merges with what is stored now, and its write drops the cache entry.
        await rt.invoke_tool(TOOL_NAME, {"tone": "calm"})
        assert stored_record(rt.matrix)["agentName"] == "Other"
        fresh = await rt.build("three")
        assert fresh.input["user_preferences"]["agent_name"] == "Other"
        assert fresh.input["user_preferences"]["tone"] == "calm"


async def test_the_cache_expires_after_its_ttl() -> None:
    prefs = UserPreferencesPlugin(cache_seconds=0.05)
    async with await runtime(stored=encode_content({"tone": "dry"}), prefs=prefs) as rt:
        assert (await rt.build("a")).input["user_preferences"]["tone"] == "dry"
        rt.matrix.state_events[SLOT] = encode_content({"tone": "warm"})
        await asyncio.sleep(0.1)
        assert (await rt.build("b")).input["user_preferences"]["tone"] == "warm"


class HomeserverRefusal(Exception):
    """What the server's Matrix client raises: a message and the Matrix ``errcode``."""

    def __init__(self, code: str, retry_after_ms: int | None = None) -> None:
        super().__init__(f"put_state: {code} from the homeserver")
        self.code = code
        self.retry_after_ms = retry_after_ms


@dataclass
class RefusingMatrix(RecordingMatrixService):
    """The recording fake whose state writes first answer with ``refusals``."""

    refusals: list[HomeserverRefusal] = field(default_factory=list)
    write_attempts: int = 0

    async def set_state_event(
        self, room_id: str, event_type: str, content: Any, state_key: str = ""
    ) -> str:
        self.write_attempts += 1
        if self.refusals:
            raise self.refusals.pop(0)
        return await super().set_state_event(room_id, event_type, content, state_key)


@dataclass
class RendezvousMatrix(RecordingMatrixService):
    """The recording fake where a state read waits for a second one (at most 0.3 s).

    Two unserialised read-merge-write sequences then both read before either writes,
    which is the race the plugin's per-record lock prevents.
    """

    _first_reader: asyncio.Event | None = field(default=None, init=False, repr=False)

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        # The answer is what the room held when the request arrived; it is delivered
        # once the other request has arrived too (or the wait times out).
        answer = await super().get_state_event(room_id, event_type, state_key)
        if self._first_reader is None:
            arrived = self._first_reader = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), 0.3)
            self._first_reader = None
        else:
            self._first_reader.set()
        return answer


def use_matrix(rt: TestRuntime, double: RecordingMatrixService) -> None:
    double.user_rooms.update(rt.matrix.user_rooms)
    double.state_events.update(rt.matrix.state_events)
    rt.runtime.ambient.matrix = double
    rt.matrix = double


async def test_a_refused_write_comes_back_as_an_error_string() -> None:
    async with await runtime() as rt:
        double = RefusingMatrix(refusals=[HomeserverRefusal("M_FORBIDDEN")])
        use_matrix(rt, double)
        result = await rt.invoke_tool(TOOL_NAME, {"tone": "calm"})
        assert result == (
            "[Error updating user preferences: put_state: M_FORBIDDEN from the homeserver]"
        )
        assert SLOT not in double.state_events


async def test_a_rate_limited_write_waits_and_retries() -> None:
    async with await runtime() as rt:
        double = RefusingMatrix(refusals=[HomeserverRefusal("M_LIMIT_EXCEEDED", 20)])
        use_matrix(rt, double)
        result = await rt.invoke_tool(TOOL_NAME, {"tone": "calm"})
        assert result.startswith("Updated.")
        assert double.write_attempts == 2
        assert stored_record(double)["tone"] == "calm"


async def test_concurrent_writes_for_one_user_both_land() -> None:
    async with await runtime() as rt:
        use_matrix(rt, RendezvousMatrix())
        results = await asyncio.gather(
            rt.invoke_tool(TOOL_NAME, {"tone": "calm"}),
            rt.invoke_tool(TOOL_NAME, {"language": "de"}),
        )
        assert all(r.startswith("Updated.") for r in results)
        record = stored_record(rt.matrix)
        assert record["tone"] == "calm"
        assert record["language"] == "de"
