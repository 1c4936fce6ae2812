"""``PassthroughChatOpenAI``: ``ChatOpenAI`` without the SDK's per-request walk of the history.

Imported only when a model is built (it imports ``langchain_openai``).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_openai import ChatOpenAI

__all__ = ["PassthroughChatOpenAI"]

# Request fields that langchain-openai has already turned into plain JSON values.
_PASSED_THROUGH = ("messages", "tools")


class PassthroughChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that hands the message list and tool schemas to the SDK as they are.

    ``openai``'s ``chat.completions.create`` runs every argument through
    ``openai._utils._transform`` before encoding it, walking each message and each tool
    against the request's ``TypedDict`` unions. For chat-completions parameters that walk
    renames nothing and formats nothing (no field of a message or tool param carries an
    alias or a format), so it only re-checks what ``ChatOpenAI._get_request_payload``
    has just built from LangChain messages: plain dicts, lists and strings. Its cost grows
    with the history: under cProfile it was 30% of a short turn's CPU and 86% of a turn
    on a 500-message thread.

    ``extra_body`` is merged into the request JSON after the transform and skips it. This
    class moves ``messages`` and ``tools`` there and leaves an empty list in their place:
    the SDK still gets the arguments it requires, and because the merge keeps the first
    mapping's key order and takes the second one's values, the request body is the same
    JSON, byte for byte. Usage, stream options and every other argument still go through
    the transform.

    Left alone: structured output (``response_format``), which the SDK's ``parse()``
    path reads ``messages`` and ``tools`` for, and the Responses API, whose payload has
    no ``messages``.
    """

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "messages" not in payload or "response_format" in payload:
            return payload
        extra_body = payload.get("extra_body") or {}
        moved = {key: payload[key] for key in _PASSED_THROUGH if key in payload}
        for key in moved:
            payload[key] = []
        payload["extra_body"] = {**moved, **extra_body}
        return payload
