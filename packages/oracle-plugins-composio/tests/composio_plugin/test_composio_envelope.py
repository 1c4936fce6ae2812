"""The pinned execute envelope: exactly ``{tools:[{tool_slug, arguments}],
sync_response_to_workbench}``, or a corrective message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oracle_plugins.composio import ENVELOPE_EXAMPLE, check_envelope

GOOD = {
    "tools": [{"tool_slug": "GMAIL_SEND_EMAIL", "arguments": {"subject": "Hi"}}],
    "sync_response_to_workbench": False,
}


NO_SYNC = {"sync_response_to_workbench": False}


def _shape(message: str) -> Any:
    """The JSON shape the message proposes (its last line)."""
    return message.splitlines()[-1]


@pytest.mark.parametrize(
    "args",
    [
        GOOD,
        {**GOOD, "sync_response_to_workbench": True},
        {
            "tools": [
                {"tool_slug": "COMPOSIO_SEARCH_WEB", "arguments": {}},
                {"tool_slug": "GITHUB_CREATE_AN_ISSUE", "arguments": {"title": "x"}},
            ],
            "sync_response_to_workbench": False,
        },
    ],
)
def test_the_envelope_passes(args: dict[str, Any]) -> None:
    assert check_envelope(args) is None


def test_a_slug_as_a_top_level_key_gets_the_wrapped_call() -> None:
    message = check_envelope({"GMAIL_SEND_EMAIL": {"subject": "Hi"}})
    assert message is not None
    assert message.startswith("COMPOSIO_MULTI_EXECUTE_TOOL was not run:")
    assert "'GMAIL_SEND_EMAIL' passed as a top-level key" in message
    assert json.loads(_shape(message)) == GOOD


def test_a_slug_as_a_key_inside_tools_gets_the_wrapped_call() -> None:
    message = check_envelope(
        {"tools": [{"GMAIL_SEND_EMAIL": {"subject": "Hi"}}], "sync_response_to_workbench": False}
    )
    assert message is not None
    assert "tools[0] uses 'GMAIL_SEND_EMAIL' as a key" in message
    assert json.loads(_shape(message)) == GOOD


def test_a_missing_flag_gets_the_call_with_the_flag() -> None:
    message = check_envelope({"tools": GOOD["tools"]})
    assert message is not None
    assert "`sync_response_to_workbench` is required" in message
    assert json.loads(_shape(message)) == GOOD


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ("GMAIL_SEND_EMAIL", "the arguments must be a JSON object"),
        ({**GOOD, "session": "abc"}, "unexpected top-level keys 'session'"),
        ({"sync_response_to_workbench": False}, "`tools` must be a non-empty array"),
        ({"tools": [], "sync_response_to_workbench": False}, "`tools` must be a non-empty array"),
        ({"tools": {"tool_slug": "X_Y"}, "sync_response_to_workbench": False}, "non-empty array"),
        ({"tools": ["GMAIL_SEND_EMAIL"], "sync_response_to_workbench": False}, "tools[0] must be"),
        (
            {
                "tools": [{"tool_slug": "A_B", "arguments": {}, "id": 1}],
                **{"sync_response_to_workbench": False},
            },
            "tools[0] has unexpected keys 'id'",
        ),
        (
            {"tools": [{"tool_slug": " ", "arguments": {}}], "sync_response_to_workbench": False},
            "tools[0].tool_slug must be",
        ),
        (
            {"tools": [{"tool_slug": "A_B"}], "sync_response_to_workbench": False},
            "tools[0].arguments must be an object",
        ),
        ({**GOOD, "sync_response_to_workbench": "false"}, "must be true or false"),
    ],
)
def test_every_other_malformed_envelope_gets_the_right_shape(args: Any, problem: str) -> None:
    message = check_envelope(args)
    assert message is not None
    assert problem in message
    assert "Call it again with exactly this shape and no other keys" in message
    shape = _shape(message)
    assert shape == ENVELOPE_EXAMPLE or json.loads(shape)["sync_response_to_workbench"] is False


def test_long_arguments_are_not_echoed_whole() -> None:
    message = check_envelope({"GMAIL_SEND_EMAIL": {"body": "x" * 2000}})
    assert message is not None
    assert '"arguments": {...}' in message
    assert len(message) < 600
