"""Session titles: made after a session's first turn (issue: sessions in the client's shape).

With a model configured for the ``session-title`` role the title is asked of it; without
one, or when it fails, the title is the first words of the user's first message.
"""

from __future__ import annotations

import asyncio
import logging
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from oracle_core import CoreEnv

__all__ = ["UNTITLED", "fallback_title", "generate_title", "has_title_model"]

logger = logging.getLogger("oracle.server.titles")

UNTITLED = "Untitled"
MAX_WORDS = 6
MAX_CHARS = 80
TITLE_TIMEOUT_SECONDS = 15.0
_PROMPT = (
    "Write a title of at most six words for a conversation that starts with the message "
    "below. Answer with the title only, no quotes.\n\nMessage:\n{message}"
)
_EDGES = "\"'`*#:.,;!?- \n\t"


def has_title_model(core: CoreEnv) -> bool:
    """Whether the configuration names a model for the ``session-title`` role.

    The hosted providers have one by default; ``openai-compatible`` only when
    ``OPENAI_COMPATIBLE_ROLE_MODELS`` maps the role (a single local model is not spent on
    titles).
    """
    return core.llm_provider != "openai-compatible" or "session-title" in core.role_models()


def fallback_title(message: str) -> str:
    """The first words of ``message``, or ``Untitled`` when it has none."""
    words = re.sub(r"\s+", " ", message).strip().split(" ")
    title = " ".join(words[:MAX_WORDS]).strip(_EDGES)
    if len(title) > MAX_CHARS:
        title = title[: MAX_CHARS - 1].rstrip() + "…"
    return title or UNTITLED


def _clean(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    title = first.removeprefix("Title:").strip(_EDGES)
    return title[:MAX_CHARS].strip()


async def generate_title(model: BaseChatModel | None, message: str) -> str:
    """A title for a conversation that starts with ``message``; never raises."""
    if model is not None:
        try:
            async with asyncio.timeout(TITLE_TIMEOUT_SECONDS):
                answer = await model.ainvoke([HumanMessage(_PROMPT.format(message=message))])
            title = _clean(str(answer.text))
            if title:
                return title
        except Exception as exc:
            logger.warning("titles.model_failed: %s; using the first words", type(exc).__name__)
    return fallback_title(message)
