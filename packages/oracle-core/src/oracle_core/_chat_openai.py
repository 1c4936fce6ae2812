"""``PassthroughChatOpenAI``: ``ChatOpenAI`` without the SDK's per-request walk of the history.

Imported only when a model is built (it imports ``langchain_openai``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Self

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from openai import AsyncStream
from pydantic import PrivateAttr, model_validator

__all__ = ["PassthroughChatOpenAI"]

# Request fields that langchain-openai has already turned into plain JSON values.
_PASSED_THROUGH = ("messages", "tools")


CONVERTED_MESSAGES_KEPT = 10_000
"""Converted messages a model keeps (least recently used go first)."""


class _ConvertedMessages:
    """The OpenAI form of LangChain messages, by the objects their fields hold.

    A turn calls the model at least twice with the same history plus a few messages, and
    the next turn sends it again; converting a 500-message history cost about as much as
    the rest of the request. A message is known by its class and the identities of its
    field values, which the entry holds on to (so no other object takes their identity):
    the same message, or a copy sharing its values (the checkpointer hands each load
    such copies), is converted once; a field given a new value converts it again. A value
    changed in place is not noticed; LangChain and LangGraph build new messages rather
    than change sent ones, and so does the runtime.
    """

    def __init__(self, size: int = CONVERTED_MESSAGES_KEPT) -> None:
        self.size = size
        self._held: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = OrderedDict()
        # Models are shared with sync tools, which run in worker threads.
        self._lock = threading.Lock()

    def get(self, message: BaseMessage) -> Any:
        key, _ = _identity(message)
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            return held[1]

    def put(self, message: BaseMessage, converted: Any) -> None:
        key, values = _identity(message)
        with self._lock:
            self._held[key] = (values, converted)
            self._held.move_to_end(key)
            while len(self._held) > self.size:
                self._held.popitem(last=False)

    def __len__(self) -> int:
        return len(self._held)


def _identity(message: BaseMessage) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    values = tuple(message.__dict__.values())
    return (type(message), *map(id, values)), values


class _JsonChunkCompletions:
    """``chat.completions`` whose streams yield each chunk's JSON object, not an SDK model.

    langchain-openai reads a streamed chunk as a dict (``chunk.model_dump()`` when the SDK
    hands it a model), so the SDK building a ``ChatCompletionChunk`` from the JSON, and
    langchain-openai dumping it back, is work for nothing: under load it was a tenth of
    the server's event loop. The SDK's own ``with_raw_response`` and ``parse(to=...)``
    read the stream with ``object`` as the chunk type, which hands the JSON over as it
    came; the SDK's errors (HTTP status, error events in the stream) are raised as before.
    Everything else is the SDK's ``chat.completions``.
    """

    def __init__(self, completions: Any) -> None:
        self.completions = completions

    async def create(self, **payload: Any) -> Any:
        if not payload.get("stream"):
            return await self.completions.create(**payload)
        raw = await self.completions.with_raw_response.create(**payload)
        return raw.parse(to=AsyncStream[object])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.completions, name)


def _message_list(input_: LanguageModelInput) -> Sequence[BaseMessage] | None:
    if isinstance(input_, list) and all(isinstance(m, BaseMessage) for m in input_):
        return input_
    return None


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

    Each message is converted once (``_ConvertedMessages``): langchain-openai converts a
    list one message at a time, each on its own, so the request is the one it would build
    for the whole list.

    A streamed response hands langchain-openai each chunk's JSON as it came
    (``_JsonChunkCompletions``).
    """

    _converted: _ConvertedMessages = PrivateAttr(default_factory=_ConvertedMessages)

    @model_validator(mode="after")
    def _stream_json_chunks(self) -> Self:
        """Streams hand langchain-openai the chunks' JSON (``_JsonChunkCompletions``)."""
        if self.async_client is not None and not isinstance(
            self.async_client, _JsonChunkCompletions
        ):
            self.async_client = _JsonChunkCompletions(self.async_client)
        return self

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        payload = self._payload_converting_new_messages(input_, stop=stop, **kwargs)
        if "messages" not in payload or "response_format" in payload:
            return payload
        extra_body = payload.get("extra_body") or {}
        moved = {key: payload[key] for key in _PASSED_THROUGH if key in payload}
        for key in moved:
            payload[key] = []
        payload["extra_body"] = {**moved, **extra_body}
        return payload

    def _payload_converting_new_messages(
        self, input_: LanguageModelInput, *, stop: list[str] | None, **kwargs: Any
    ) -> dict[str, Any]:
        messages = _message_list(input_)
        if messages is None:
            return dict(super()._get_request_payload(input_, stop=stop, **kwargs))
        converted = self._converted
        held = [converted.get(m) for m in messages]
        new = [m for m, d in zip(messages, held, strict=True) if d is None]
        payload: dict[str, Any] = super()._get_request_payload(new, stop=stop, **kwargs)
        if "messages" not in payload:  # the Responses API builds from the whole list
            return dict(super()._get_request_payload(input_, stop=stop, **kwargs))
        fresh = iter(payload["messages"])
        full = []
        for message, known in zip(messages, held, strict=True):
            if known is None:
                made = next(fresh)
                converted.put(message, made)
                full.append(made)
            else:
                full.append(known)
        payload["messages"] = full
        return payload
