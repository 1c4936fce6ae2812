"""The stored form, checked against payloads that the JavaScript libraries produced.

The fixtures below were made once with Node 20 and superjson 2.2.7 (``npm install
superjson@2`` in a scratch directory, nothing of it kept), by a script of this shape::

    import superjson from 'superjson';
    import { deflateSync } from 'node:zlib';
    const text = superjson.stringify(prefs);
    console.log(text, deflateSync(Buffer.from(text, 'utf8')).toString('base64'));

which is what the TypeScript runtime's Matrix state manager writes into ``data``.
Node's ``inflateSync`` + ``superjson.parse`` also read this package's ``encode_data``
output back unchanged when checked that way.
"""

from __future__ import annotations

import base64
import json
import zlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from oracle_plugins.user_preferences import (
    PreferencesFormatError,
    SuperJSONError,
    decode_content,
    decode_data,
    encode_content,
    encode_data,
    js_iso_string,
    superjson_dumps,
    superjson_loads,
)

# superjson.stringify of a full record with plain strings (no meta: nothing special).
NODE_PREFS = {
    "agentName": "Nova",
    "language": "pt-BR",
    "tone": "warm, playful",
    "formality": "casual",
    "customInstructions": "Use metric units. Ação — ok ✓",
    "updatedAt": "2025-06-01T10:00:00.000Z",
}
NODE_PREFS_TEXT = (
    '{"json":{"agentName":"Nova","language":"pt-BR","tone":"warm, playful",'
    '"formality":"casual","customInstructions":"Use metric units. Ação — ok ✓",'
    '"updatedAt":"2025-06-01T10:00:00.000Z"}}'
)
# deflateSync of NODE_PREFS_TEXT, base64: the current stored form.
NODE_PREFS_DATA = (
    "eJwVyDEKwjAYhuGrhG9OJS3okK1uLg6ii9tPjSXaJCX5o4gI3kFHNwcP4k08iQTe5X2uOKTgoa+g3nhekjPQWIYT"
    "QWIg32fqi4xczVeQ4ODLnik6KcaBLvs8QGIfoqPB8gUaHaVMBbucOLiFTxxzxzb4BI1NMsIZjrYT2VtOE9F+P993"
    "EL/7U4Sj+L0ekMjjjtjsWoZGo5pppWaVqte10qo0UUptcbv9AUZSQA4="
)
# The legacy form: superjson text itself in `data`, here with updatedAt as a JS Date.
NODE_LEGACY_TEXT = (
    '{"json":{"agentName":"Sage","language":"fr","tone":"dry","formality":"formal",'
    '"customInstructions":"Cite sources.","updatedAt":"2024-03-02T01:02:03.456Z"},'
    '"meta":{"values":{"updatedAt":["Date"]},"v":1}}'
)
# Dates, undefined and an escaped dot in a key, compressed.
NODE_ANNOTATED_TEXT = (
    '{"json":{"agentName":"Legacy","updatedAt":"2024-03-02T01:02:03.456Z","nested":'
    '{"when":"1970-01-01T00:00:00.000Z"},"gone":null},"meta":{"values":{"updatedAt":["Date"],'
    '"nested.when":["Date"],"gone":["undefined"]},"v":1}}'
)
NODE_ANNOTATED_DATA = (
    "eJxNjUELgkAUhP/LnFd5q1b0bkHH6ORJ8bC0Lyt0Ddw1Qva/h0UUzGEYmO+bcRsHB55hWnH+aHoB4yCtOT2hEO7W"
    "eLE7D0ZGWZFQnlBWkmbKmPK0WK0rKDgZvdiF8riIA0NvN5SQTkiXRPxOSkQVokI7OAG70HVRoRdvlt9kuiDj0v6U"
    "NfbGC5qvIP3Qf/MHVSM4K+erE4smKkxgHeMLW8tBpg=="
)
NODE_ESCAPED_KEYS = (
    '{"json":{"a.b":"1970-01-01T00:00:00.000Z","arr":["1970-01-01T00:00:00.000Z",1]},'
    '"meta":{"values":{"a\\\\.b":["Date"],"arr.0":["Date"]},"v":1}}'
)
NODE_SPECIAL_VALUES = (
    '{"json":{"a\\\\b":"1970-01-01T00:00:00.000Z","x.y":{"z":null},'
    '"m":[["k","1970-01-01T00:00:00.000Z"]],"n":"NaN","big":"10","l":[null,1]},'
    '"meta":{"values":{"a\\\\\\\\b":["Date"],"x\\\\.y.z":["undefined"],'
    '"m":["map",{"0.1":["Date"]}],"n":["number"],"big":["bigint"],"l.0":["undefined"]},"v":1}}'
)


def test_superjson_text_matches_the_javascript_library_byte_for_byte() -> None:
    assert superjson_dumps(NODE_PREFS) == NODE_PREFS_TEXT
    assert superjson_loads(NODE_PREFS_TEXT) == NODE_PREFS


def test_compressed_payload_from_node_decodes() -> None:
    assert decode_data(NODE_PREFS_DATA) == NODE_PREFS
    assert decode_content({"data": NODE_PREFS_DATA}) == NODE_PREFS


def test_legacy_uncompressed_payload_with_a_date_decodes() -> None:
    assert decode_content({"data": NODE_LEGACY_TEXT}) == {
        "agentName": "Sage",
        "language": "fr",
        "tone": "dry",
        "formality": "formal",
        "customInstructions": "Cite sources.",
        "updatedAt": "2024-03-02T01:02:03.456Z",
    }


def test_dates_and_undefined_are_revived_as_superjson_does() -> None:
    assert decode_data(NODE_ANNOTATED_DATA) == {
        "agentName": "Legacy",
        "updatedAt": "2024-03-02T01:02:03.456Z",
        "nested": {"when": "1970-01-01T00:00:00.000Z"},
    }
    assert superjson_loads(NODE_ESCAPED_KEYS) == {
        "a.b": "1970-01-01T00:00:00.000Z",
        "arr": ["1970-01-01T00:00:00.000Z", 1],
    }
    assert superjson_loads('{"json":"1970-01-01T00:00:00.000Z","meta":{"values":["Date"]}}') == (
        "1970-01-01T00:00:00.000Z"
    )
    assert superjson_loads('{"json":null,"meta":{"values":["undefined"],"v":1}}') is None


def test_types_a_preferences_object_never_holds_are_refused() -> None:
    # A Map nested in the document: refused rather than half-read.
    with pytest.raises(SuperJSONError, match="'map'"):
        superjson_loads(NODE_SPECIAL_VALUES)
    without_map = json.loads(NODE_SPECIAL_VALUES)
    del without_map["json"]["m"], without_map["meta"]["values"]["m"]
    value = superjson_loads(json.dumps(without_map))
    assert value["a\\b"] == "1970-01-01T00:00:00.000Z"
    assert value["x.y"] == {}
    assert value["n"] != value["n"]  # NaN
    assert value["big"] == 10
    assert value["l"] == [None, 1]
    with pytest.raises(SuperJSONError, match="'regexp'"):
        superjson_loads('{"json":{"r":"/a/"},"meta":{"values":{"r":["regexp"]}}}')


def test_writing_a_datetime_produces_a_date_entry() -> None:
    moment = datetime(2024, 3, 2, 3, 2, 3, 456000, tzinfo=timezone(timedelta(hours=2)))
    assert js_iso_string(moment) == "2024-03-02T01:02:03.456Z"
    assert superjson_dumps({"updatedAt": moment, "a.b": [moment]}) == (
        '{"json":{"updatedAt":"2024-03-02T01:02:03.456Z","a.b":["2024-03-02T01:02:03.456Z"]},'
        '"meta":{"values":{"updatedAt":["Date"],"a\\\\.b.0":["Date"]},"v":1}}'
    )
    assert superjson_loads(superjson_dumps({"a.b": [moment]})) == {
        "a.b": ["2024-03-02T01:02:03.456Z"]
    }
    assert superjson_dumps(datetime(1970, 1, 1, tzinfo=UTC)) == (
        '{"json":"1970-01-01T00:00:00.000Z","meta":{"values":["Date"],"v":1}}'
    )
    with pytest.raises(SuperJSONError):
        superjson_dumps({"x": object()})


def test_encoded_content_is_zlib_base64_of_the_superjson_text() -> None:
    content = encode_content(NODE_PREFS)
    assert set(content) == {"data"}
    raw = base64.b64decode(content["data"], validate=True)
    assert raw[:1] == b"\x78"  # zlib framing, what Node's inflateSync expects
    assert zlib.decompress(raw).decode() == NODE_PREFS_TEXT
    assert decode_content(content) == NODE_PREFS
    assert encode_data(NODE_PREFS) == content["data"]


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"data": 42},
        {"data": "not superjson at all"},
        {"data": base64.b64encode(b"not zlib").decode()},
        {"data": base64.b64encode(zlib.compress(b'{"no json key": 1}')).decode()},
        {"data": '{"json":{"a":1},"meta":{"values":{"missing":["Date"]}}}'},
    ],
)
def test_unreadable_content_raises_a_format_error(content: dict[str, object]) -> None:
    with pytest.raises(PreferencesFormatError):
        decode_content(content)


def test_a_decompression_bomb_is_refused() -> None:
    bomb = base64.b64encode(zlib.compress(b'{"json":"' + b"a" * 2_000_000 + b'"}')).decode()
    with pytest.raises(PreferencesFormatError, match="too large"):
        decode_data(bomb)
