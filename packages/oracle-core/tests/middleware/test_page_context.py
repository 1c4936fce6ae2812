"""Tests of ``page-context`` (CORE-80)."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from oracle_core._middleware import PageContextMiddleware
from oracle_core._state import MainAgentState
from oracle_core.testing import ScriptedChatModel, reply


def answers_ok() -> ScriptedChatModel:
    """A model that answers every call with ``ok``; its ``calls`` keep the system prompts."""
    return ScriptedChatModel(on_exhausted=reply("ok"))


def prompts(model: ScriptedChatModel) -> list[str | None]:
    """The system prompt sent with each call, oldest first."""
    return [call.system_prompt for call in model.calls]


TITLES = {"!roadmap:example.org": "Roadmap 2026", "!notes:example.org": "Meeting notes"}
LOOKUPS: list[str] = []


async def room_title(room_id: str) -> str | None:
    LOOKUPS.append(room_id)
    return TITLES.get(room_id)


async def failing_title(room_id: str) -> str | None:
    raise ConnectionError("homeserver unreachable")


def agent(model: ScriptedChatModel, middleware: PageContextMiddleware, **kwargs: Any) -> Any:
    return create_agent(
        model,
        [],
        system_prompt="You are Ada.",
        middleware=[middleware],
        state_schema=MainAgentState,
        **kwargs,
    )


def turn(room_id: str | None) -> dict[str, Any]:
    return {"messages": [("user", "edit the page")], "editor_room_id": room_id}


async def test_active_page_note_is_appended_with_the_title() -> None:
    model = answers_ok()
    LOOKUPS.clear()

    await agent(model, PageContextMiddleware(room_title)).ainvoke(turn("!roadmap:example.org"))

    [prompt] = prompts(model)
    assert prompt is not None
    assert prompt.startswith("You are Ada.\n\n## Active page\n")
    assert "'Roadmap 2026' (room !roadmap:example.org)" in prompt
    assert "switched" not in prompt
    assert LOOKUPS == ["!roadmap:example.org"]


async def test_no_page_leaves_the_system_prompt_alone() -> None:
    model = answers_ok()
    LOOKUPS.clear()

    await agent(model, PageContextMiddleware(room_title)).ainvoke(turn(None))

    assert prompts(model) == ["You are Ada."]
    assert LOOKUPS == []


async def test_page_switch_is_reported_as_stale_context_needing_a_re_read() -> None:
    model = answers_ok()
    graph = agent(model, PageContextMiddleware(room_title), checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}

    await graph.ainvoke(turn("!roadmap:example.org"), config)
    await graph.ainvoke(turn("!roadmap:example.org"), config)
    await graph.ainvoke(turn("!notes:example.org"), config)

    first, same, switched = prompts(model)
    assert first is not None
    assert same is not None
    assert "switched" not in first
    assert "switched" not in same
    assert switched is not None
    assert "'Meeting notes' (room !notes:example.org)" in switched
    assert "switched pages: previously room !roadmap:example.org" in switched
    assert "stale" in switched
    assert "Read the current page again before editing" in switched
    state = await graph.aget_state(config)
    assert state.values["_previous_editor_room_id"] == "!notes:example.org"


async def test_previous_page_is_private_to_the_middleware() -> None:
    model = answers_ok()

    result = await agent(model, PageContextMiddleware(room_title)).ainvoke(
        turn("!roadmap:example.org")
    )

    assert "_previous_editor_room_id" not in result


async def test_title_lookup_error_falls_back_to_the_room_id() -> None:
    model = answers_ok()

    await agent(model, PageContextMiddleware(failing_title)).ainvoke(turn("!roadmap:example.org"))

    [prompt] = prompts(model)
    assert prompt is not None
    assert "the editor page room !roadmap:example.org open" in prompt
    assert "Roadmap 2026" not in prompt


async def test_unknown_title_falls_back_to_the_room_id() -> None:
    model = answers_ok()

    await agent(model, PageContextMiddleware(room_title)).ainvoke(turn("!other:example.org"))

    [prompt] = prompts(model)
    assert prompt is not None
    assert "the editor page room !other:example.org open" in prompt


def test_sync_run_names_the_room_without_a_title_lookup() -> None:
    model = answers_ok()
    LOOKUPS.clear()

    agent(model, PageContextMiddleware(room_title)).invoke(turn("!roadmap:example.org"))

    [prompt] = prompts(model)
    assert prompt is not None
    assert "the editor page room !roadmap:example.org open" in prompt
    assert LOOKUPS == []


async def test_note_is_added_to_list_content_and_to_a_missing_system_message() -> None:
    middleware = PageContextMiddleware(room_title)
    sent: list[SystemMessage | None] = []

    async def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        sent.append(request.system_message)
        return ModelResponse(result=[AIMessage(content="ok")])

    state: Any = {"messages": [], "editor_room_id": "!notes:example.org"}
    base = ModelRequest(
        model=ScriptedChatModel(), messages=[HumanMessage(content="hi")], state=state
    )
    blocks = SystemMessage(content=[{"type": "text", "text": "You are Ada."}])
    await middleware.awrap_model_call(base.override(system_message=blocks), handler)
    await middleware.awrap_model_call(base, handler)

    with_blocks, created = sent
    assert with_blocks is not None
    assert isinstance(with_blocks.content, list)
    assert with_blocks.content[0] == {"type": "text", "text": "You are Ada."}
    assert "Meeting notes" in with_blocks.text
    assert created is not None
    assert created.text.startswith("## Active page")
    # The request's own message is left as it was.
    assert blocks.content == [{"type": "text", "text": "You are Ada."}]
