"""Chain text is written by anyone: it is kept short and stripped of control characters.

Nothing here makes it trustworthy; the tool descriptions and the operating guide tell the
model to treat it as data, never as instructions. Limits only keep answers small.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["EXCERPT_LENGTH", "clean_text", "json_excerpt"]

EXCERPT_LENGTH = 240
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean_text(value: str, limit: int) -> tuple[str, bool]:
    """``value`` without control or bidi-override characters, cut to ``limit`` characters.

    Returns:
        The text and whether it was cut.
    """
    text = _CONTROL.sub(" ", value).strip()
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def json_excerpt(value: Any, limit: int = EXCERPT_LENGTH) -> str:
    """The first ``limit`` characters of ``value`` as compact JSON."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
