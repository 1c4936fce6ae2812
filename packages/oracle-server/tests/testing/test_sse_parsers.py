"""The Python ports of the client SDK's SSE parsers (1.4.0 persistent, 1.1.x per read)."""

from __future__ import annotations

import itertools
import json
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle_server.testing import (
    ACCEPTED_EVENTS,
    PER_READ_ACCEPTED_EVENTS,
    PerReadSseParser,
    PersistentSseParser,
    SseEvent,
    frame_boundaries,
    parse_stream,
    split_everywhere,
)

PARSERS: tuple[Literal["persistent", "per_read"], ...] = ("persistent", "per_read")


def frame(event: str, data: Any, *, frame_id: int | None = None) -> str:
    """One frame as the server writes it (SRV-30)."""
    head = "" if frame_id is None else f"id: {frame_id}\n"
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


# A streamed turn in the order SRV-32 prescribes, with a heartbeat in between.
TURN_BODY = "".join(
    [
        frame("reasoning", {"reasoning": "Thinking…", "reasoningDetails": []}),
        frame("message", {"content": "Hel", "timestamp": "t1"}),
        ": heartbeat\n\n",
        frame("message", {"content": "lo — ünïcode", "timestamp": "t2"}),
        frame("tool_call", {"toolName": "get_weather", "status": "isRunning", "args": {}}),
        frame("tool_call", {"toolName": "get_weather", "status": "done", "output": "sunny"}),
        frame("reasoning", {"reasoning": "", "isComplete": True}),
        frame("done", {"status": "finished", "timestamp": "t3"}),
    ]
)
TURN_EVENTS = [
    "reasoning",
    "message",
    "message",
    "tool_call",
    "tool_call",
    "reasoning",
    "done",
]


@pytest.mark.parametrize("parser", PARSERS)
def test_whole_frames_are_parsed_in_order(parser: Literal["persistent", "per_read"]) -> None:
    events = parse_stream([TURN_BODY], parser)

    assert [e.event for e in events] == TURN_EVENTS
    assert events[1] == SseEvent("message", {"content": "Hel", "timestamp": "t1"}, None)
    assert events[3].data["status"] == "isRunning"
    assert events[-1].data == {"status": "finished", "timestamp": "t3"}


@pytest.mark.parametrize("parser", PARSERS)
def test_crlf_line_endings_are_accepted(parser: Literal["persistent", "per_read"]) -> None:
    body = TURN_BODY.replace("\n", "\r\n")

    assert parse_stream([body], parser) == parse_stream([TURN_BODY], parser)


@pytest.mark.parametrize("parser", PARSERS)
def test_a_comment_line_dispatches_the_frame(parser: Literal["persistent", "per_read"]) -> None:
    body = 'event: message\ndata: {"content": "a"}\n: heartbeat\nevent: done\ndata: {}\n\n'

    events = parse_stream([body], parser)

    assert events == [SseEvent("message", {"content": "a"}), SseEvent("done", {})]


@pytest.mark.parametrize("parser", PARSERS)
def test_a_comment_inside_an_incomplete_frame_does_not_end_it(
    parser: Literal["persistent", "per_read"],
) -> None:
    body = 'event: message\n: heartbeat\ndata: {"content": "a"}\n\n'

    assert parse_stream([body], parser) == [SseEvent("message", {"content": "a"})]


@pytest.mark.parametrize("parser", PARSERS)
def test_only_the_last_data_line_counts(parser: Literal["persistent", "per_read"]) -> None:
    body = 'event: message\ndata: {"content": "first"}\ndata: {"content": "second"}\n\n'

    assert parse_stream([body], parser) == [SseEvent("message", {"content": "second"})]


@pytest.mark.parametrize("parser", PARSERS)
def test_a_frame_without_event_line_is_dropped(parser: Literal["persistent", "per_read"]) -> None:
    body = 'data: {"content": "orphan"}\n\n' + frame("done", {"status": "finished"})

    assert parse_stream([body], parser) == [SseEvent("done", {"status": "finished"})]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("data", ["not json", "{'single': 'quotes'}", "NaN", "Infinity", "{"])
def test_non_json_data_is_dropped(parser: Literal["persistent", "per_read"], data: str) -> None:
    body = f"event: message\ndata: {data}\n\n" + frame("done", {})

    assert parse_stream([body], parser) == [SseEvent("done", {})]


@pytest.mark.parametrize("parser", PARSERS)
def test_unknown_event_names_are_dropped(parser: Literal["persistent", "per_read"]) -> None:
    body = frame("tool_approval_request", {"id": 1}) + frame("done", {})

    assert parse_stream([body], parser) == [SseEvent("done", {})]


def test_run_frames_reach_only_sdk_1_4() -> None:
    body = frame("run", {"runId": "r-1", "requestId": "q-1"}, frame_id=1) + frame("done", {})

    assert [e.event for e in parse_stream([body], "persistent")] == ["run", "done"]
    assert [e.event for e in parse_stream([body], "per_read")] == ["done"]
    assert set(ACCEPTED_EVENTS) - set(PER_READ_ACCEPTED_EVENTS) == {"run"}


def test_persistent_parser_keeps_numeric_ids_only() -> None:
    body = (
        frame("message", {"content": "a"}, frame_id=7)
        + 'id: abc\nevent: message\ndata: {"content": "b"}\n\n'
        + 'id: -3\nevent: message\ndata: {"content": "c"}\n\n'
        + frame("done", {})
    )

    events = parse_stream([body], "persistent")

    assert [(e.data.get("content"), e.id) for e in events] == [
        ("a", 7),
        ("b", None),
        ("c", None),
        (None, None),
    ]


def test_per_read_parser_ignores_ids() -> None:
    body = frame("message", {"content": "a"}, frame_id=7)

    assert parse_stream([body], "per_read") == [SseEvent("message", {"content": "a"}, None)]


def test_the_id_belongs_to_its_frame_only() -> None:
    body = frame("message", {"content": "a"}, frame_id=1) + frame("done", {})

    events = parse_stream([body], "persistent")

    assert [e.id for e in events] == [1, None]


def test_persistent_parser_parses_a_last_frame_without_blank_line_at_end() -> None:
    for tail in ('event: done\ndata: {"status": "finished"}', 'event: done\ndata: {"s": 1}\n'):
        parser = PersistentSseParser()

        assert parser.feed(tail) == []
        assert [e.event for e in parser.end()] == ["done"]
        assert parser.end() == []


def test_per_read_parser_only_looks_at_the_last_line_at_end() -> None:
    # SDK 1.1.x examines only the unterminated last line at the end of the stream, which
    # alone never holds both fields: an unterminated last frame is lost.
    parser = PerReadSseParser()

    assert parser.feed('event: done\ndata: {"status": "finished"}') == []
    assert parser.end() == []


def test_per_read_parser_keeps_an_unknown_frames_fields_like_the_sdk() -> None:
    # The SDK's `continue` for an unknown name skips the field reset, so an event-only
    # frame that follows inherits the unknown frame's data.
    body = 'event: custom\ndata: {"x": 1}\n\nevent: message\n\n'

    assert parse_stream([body], "per_read") == [SseEvent("message", {"x": 1})]
    assert parse_stream([body], "persistent") == []


# -- splitting the body across reads (SRV-30, SRV-70 b) --------------------------------------


def test_split_everywhere_covers_every_frame_boundary() -> None:
    boundaries = frame_boundaries(TURN_BODY)
    splits = list(split_everywhere(TURN_BODY, random_splits=5, seed=3))

    # seven frames and a heartbeat make eight blocks; the last one ends the body
    assert len(boundaries) == 7
    assert all("".join(chunks) == TURN_BODY for chunks in splits)
    assert splits[0] == [TURN_BODY]
    assert [len(c[0]) for c in splits[1 : 1 + len(boundaries)]] == boundaries
    assert len(splits[1 + len(boundaries)]) == len(boundaries) + 1
    assert len(splits) == 1 + len(boundaries) + 1 + 5
    assert all(chunk.endswith("\n\n") for chunk in splits[1 + len(boundaries)])


def test_frame_boundaries_understand_crlf() -> None:
    body = TURN_BODY.replace("\n", "\r\n")

    assert len(frame_boundaries(body)) == len(frame_boundaries(TURN_BODY))


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_whole_frame_splits_read_the_same_with_both_sdks_ending_in_done(line_end: str) -> None:
    body = TURN_BODY.replace("\n", line_end)
    expected = parse_stream([body], "persistent")

    for chunks in split_everywhere(body, random_splits=50, seed=1):
        for parser in PARSERS:
            events = parse_stream(chunks, parser)
            assert events == expected, (parser, chunks)
            assert events[-1].event == "done"


def test_per_read_parser_loses_a_frame_split_mid_frame() -> None:
    message = frame("message", {"content": "lost?"})
    body = frame("reasoning", {"reasoning": "…"}) + message + frame("done", {})
    cut = body.index(message) + len("event: message\n")
    chunks = [body[:cut], body[cut:]]

    persistent = parse_stream(chunks, "persistent")
    per_read = parse_stream(chunks, "per_read")

    assert [e.event for e in persistent] == ["reasoning", "message", "done"]
    assert [e.event for e in per_read] == ["reasoning", "done"]


def test_per_read_parser_loses_a_frame_cut_at_any_line_end_inside_it() -> None:
    # A cut right after an `id:` line would be harmless here: SDK 1.1.x ignores ids.
    message = frame("message", {"content": "x"})
    body = message + frame("done", {})
    line_ends = [i + 1 for i, ch in enumerate(message) if ch == "\n"][:-1]  # not the boundary

    assert len(line_ends) == 2
    for cut in line_ends:
        chunks = [body[:cut], body[cut:]]
        assert [e.event for e in parse_stream(chunks, "per_read")] == ["done"], cut
        assert [e.event for e in parse_stream(chunks, "persistent")] == ["message", "done"], cut


def test_per_read_parser_survives_a_cut_inside_the_first_line() -> None:
    # The unfinished line is carried to the next read, so a cut before the first line ends
    # loses nothing; any later cut inside the frame does.
    body = frame("message", {"content": "x"}) + frame("done", {})

    events = parse_stream([body[:9], body[9:]], "per_read")

    assert [e.event for e in events] == ["message", "done"]


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(TURN_BODY)), max_size=12))
def test_persistent_parser_reads_any_split_the_same(cuts: list[int]) -> None:
    edges = [0, *sorted(cuts), len(TURN_BODY)]
    chunks = [TURN_BODY[a:b] for a, b in itertools.pairwise(edges)]

    assert [e.event for e in parse_stream(chunks, "persistent")] == TURN_EVENTS
