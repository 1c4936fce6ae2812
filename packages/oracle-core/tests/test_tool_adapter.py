"""Tests of the plugin-tool adapter: results, errors and the handler context (CORE-12 … 14)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langchain_core.tools import tool as langchain_tool
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_core._tool_adapter import encode_tool_result, model_description
from oracle_core.testing import ScriptedChatModel, TestRuntime, call_tool, create_test_runtime

# --- fixtures -------------------------------------------------------------------------

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def reset_runs() -> None:
    RUNS.clear()


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Forecast(BaseModel):
    city: str
    at: datetime
    temperature: Decimal


class Strict(BaseModel):
    required: int


@langchain_tool
def shout(text: str) -> str:
    """Repeat the text in upper case."""
    return text.upper()


class ResultsPlugin(OraclePlugin):
    name = "results"
    version = "1"
    manifest = PluginManifest(
        title="Results", summary="Result shapes.", when_to_use=["tests"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        def make(name: str, result: Any) -> PluginTool:
            @plugin_tool(name=name, description=f"Returns {name}.", args_schema=NoArgs)
            def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> Any:
                RUNS[name] += 1
                return result(rt_ctx) if callable(result) else result

            return handler

        @plugin_tool(name="call_id", description="Echoes its call id.", args_schema=NoArgs)
        async def call_id(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return f"id={rt_ctx.tool_call_id}"

        @plugin_tool(name="inner_validation", description="Validates data.", args_schema=NoArgs)
        def inner_validation(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            RUNS["inner_validation"] += 1
            Strict.model_validate({"required": "not a number"})
            return "unreachable"

        return [
            make("text", "plain text"),
            make(
                "model",
                Forecast(
                    city="Zürich",
                    at=datetime(2025, 3, 1, 9, 30, tzinfo=UTC),
                    temperature=Decimal(3),
                ),
            ),
            make("mapping", {"city": "Kraków", "ok": True}),
            make(
                "message",
                lambda ctx: ToolMessage(
                    content="custom", tool_call_id=ctx.tool_call_id, artifact={"raw": 1}
                ),
            ),
            make(
                "command",
                lambda ctx: Command(
                    update={
                        "space_id": "space-from-tool",
                        "messages": [
                            ToolMessage(content="state changed", tool_call_id=ctx.tool_call_id)
                        ],
                    }
                ),
            ),
            call_id,
            inner_validation,
            PluginTool.from_langchain(shout, effect="read"),
        ]


async def boot(model: ScriptedChatModel | None = None) -> TestRuntime:
    return await create_test_runtime(plugins=[ResultsPlugin()], model=model)


# --- encode_tool_result (CORE-13) -----------------------------------------------------


class Unserialisable:
    def __str__(self) -> str:
        return "<unserialisable>"


def test_strings_pass_through() -> None:
    assert encode_tool_result("déjà vu") == "déjà vu"
    assert encode_tool_result("") == ""


def test_pydantic_models_are_dumped_in_json_mode() -> None:
    encoded = encode_tool_result(
        Forecast(city="Zürich", at=datetime(2025, 3, 1, 9, 30, tzinfo=UTC), temperature=Decimal(3))
    )

    assert json.loads(encoded) == {
        "city": "Zürich",
        "at": "2025-03-01T09:30:00Z",
        "temperature": "3",
    }
    assert "Zürich" in encoded


def test_other_values_are_json_without_ascii_escapes() -> None:
    assert encode_tool_result({"city": "Kraków"}) == '{"city": "Kraków"}'
    assert encode_tool_result([1, "ü"]) == '[1, "ü"]'
    assert encode_tool_result(None) == "null"
    assert encode_tool_result(3) == "3"
    assert encode_tool_result({"x": Unserialisable()}) == '{"x": "<unserialisable>"}'


def test_tool_messages_and_commands_pass_through() -> None:
    message = ToolMessage(content="x", tool_call_id="c1")
    command: Command[Any] = Command(update={"space_id": "s"})

    assert encode_tool_result(message) is message
    assert encode_tool_result(command) is command


def test_model_description_prefix() -> None:
    assert model_description("Weather", "Forecast.") == "[Weather] Forecast."
    assert model_description("Weather", "[Weather] Forecast.") == "[Weather] Forecast."
    assert model_description(None, "Forecast.") == "Forecast."
    assert model_description("", "Forecast.") == "Forecast."


# --- through a turn -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_name", "content"),
    [
        ("text", "plain text"),
        (
            "model",
            '{"city": "Zürich", "at": "2025-03-01T09:30:00Z", "temperature": "3"}',
        ),
        ("mapping", '{"city": "Kraków", "ok": true}'),
    ],
)
async def test_results_reach_the_model_encoded(tool_name: str, content: str) -> None:
    model = ScriptedChatModel([call_tool(tool_name, {}, id="c-7"), "done"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("go")

    [message] = result.tool_messages(tool_name)
    assert message.content == content
    assert message.tool_call_id == "c-7"
    assert message.status == "success"
    # What the model reads on its next call is that same content.
    assert model.calls[1].messages[-1].content == content


async def test_tool_message_results_keep_their_fields() -> None:
    model = ScriptedChatModel([call_tool("message", {}, id="c-8"), "done"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("go")

    [message] = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert message.content == "custom"
    assert message.tool_call_id == "c-8"
    assert message.artifact == {"raw": 1}


async def test_command_results_update_the_state() -> None:
    model = ScriptedChatModel([call_tool("command", {}, id="c-9"), "done"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("go")

    assert result.state["space_id"] == "space-from-tool"
    [message] = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert message.text == "state changed"
    assert message.tool_call_id == "c-9"


async def test_handler_sees_its_tool_call_id() -> None:
    model = ScriptedChatModel([call_tool("call_id", {}, id="abc-123"), "done"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("go")

    assert result.tool_messages("call_id")[0].text == "id=abc-123"


async def test_validation_error_inside_a_handler_is_a_tool_failure() -> None:
    model = ScriptedChatModel([call_tool("inner_validation", {}), "It broke."])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("go")

    [message] = result.tool_messages("inner_validation")
    assert message.status == "error"
    assert "Invalid arguments" not in message.text
    assert message.text.startswith("Tool 'inner_validation' failed: ToolHandlerError:")
    assert "required" in message.text
    # A failure of the tool (not of the arguments) is retried once.
    assert RUNS["inner_validation"] == 2


async def test_langchain_tools_are_adapted_with_their_schema() -> None:
    model = ScriptedChatModel([call_tool("shout", {"text": "hi"}), "done"])
    async with await boot(model) as runtime:
        built = await runtime.build("hi")
        result = await runtime.run_turn("go")

    [adapted] = [t for t in built.tools if t.name == "shout"]
    assert adapted.description == "[Results] Repeat the text in upper case."
    assert built.tool_infos["shout"].effect == "read"
    schema = adapted.tool_call_schema
    as_json = schema if isinstance(schema, dict) else schema.model_json_schema()
    assert list(as_json["properties"]) == ["text"]
    assert as_json["required"] == ["text"]
    assert result.tool_messages("shout")[0].text == "HI"


async def test_json_schema_tools_get_their_arguments_as_a_dict() -> None:
    received: list[dict[str, Any]] = []

    async def search(**kwargs: Any) -> str:
        received.append(kwargs)
        return f"found {kwargs['query']}"

    upstream = StructuredTool(
        name="search_docs",
        description="Search documents.",
        args_schema={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
        coroutine=search,
    )

    class Docs(OraclePlugin):
        name = "docs"
        version = "1"
        manifest = PluginManifest(
            title="Docs", summary="Docs.", when_to_use=["docs"], visibility="always"
        )

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [PluginTool.from_langchain(upstream)]

    model = ScriptedChatModel([call_tool("search_docs", {"query": "ucan", "limit": 2}), "done"])
    async with await create_test_runtime(plugins=[Docs()], model=model) as runtime:
        built = await runtime.build("hi")
        result = await runtime.run_turn("search")

    [adapted] = [t for t in built.tools if t.name == "search_docs"]
    assert adapted.description == "[Docs] Search documents."
    schema = adapted.tool_call_schema
    assert isinstance(schema, dict)
    assert schema["required"] == ["query"]
    assert received == [{"query": "ucan", "limit": 2}]
    assert result.tool_messages("search_docs")[0].text == "found ucan"
