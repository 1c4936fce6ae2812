"""The checkpoint serializer: LangGraph's, with messages rebuilt without re-validation.

LangGraph's ``JsonPlusSerializer`` stores a LangChain message as its class and
``model_dump()``, and loads it back with ``cls(**fields)``: full pydantic validation plus
``AIMessage``'s tool-call normalisation, for every message of a thread on every load.
What it validates is what an earlier ``model_dump()`` of a validated message wrote, so
``CheckpointSerializer`` rebuilds the LangChain message classes without validating: when
the stored fields are exactly the class's fields (what ``model_dump()`` writes), it sets
them as ``model_construct`` would, minus the per-field walk for defaults, aliases and
extras (a fifth of validating, under a third of ``model_construct``). Any other field set
(another version of langchain-core wrote it), every other value and every message class
it does not know go through LangGraph's own hook, validation and allowlist included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ormsgpack
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.jsonplus import (
    EXT_DELTA_SNAPSHOT,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from pydantic import BaseModel

from oracle_core._langgraph_compat import DeltaSnapshot, ExtHook, wrap_msgpack_ext_hook

__all__ = ["CheckpointSerializer", "copy_message"]

_MESSAGE_CLASSES: dict[tuple[str, str], type[BaseModel]] = {
    (cls.__module__, cls.__name__): cls
    for cls in (
        lc_messages.AIMessage,
        lc_messages.AIMessageChunk,
        lc_messages.ChatMessage,
        lc_messages.ChatMessageChunk,
        lc_messages.FunctionMessage,
        lc_messages.FunctionMessageChunk,
        lc_messages.HumanMessage,
        lc_messages.HumanMessageChunk,
        lc_messages.RemoveMessage,
        lc_messages.SystemMessage,
        lc_messages.SystemMessageChunk,
        lc_messages.ToolMessage,
        lc_messages.ToolMessageChunk,
    )
}

# Classes whose instances hold nothing but their fields (extra allowed, no private
# attributes), with their field names: the ones ``_message`` may set up by hand.
_FIELDS: dict[type[BaseModel], frozenset[str]] = {
    cls: frozenset(cls.model_fields)
    for cls in _MESSAGE_CLASSES.values()
    if cls.model_config.get("extra") == "allow" and not cls.__private_attributes__
}

_OPTIONS = ormsgpack.OPT_NON_STR_KEYS
_set = object.__setattr__


def _message(cls: type[BaseModel], fields: dict[str, Any]) -> BaseModel:
    """``cls`` with exactly its ``fields`` set, unvalidated, as ``model_construct`` would."""
    # What ``model_construct`` leaves on an instance given every field and no extra
    # (the message classes allow extra fields and have no private attributes).
    message = cls.__new__(cls)
    _set(message, "__dict__", fields)
    _set(message, "__pydantic_fields_set__", set(fields))
    _set(message, "__pydantic_extra__", {})
    _set(message, "__pydantic_private__", None)
    return message


def copy_message(message: BaseModel) -> BaseModel:
    """A shallow copy of ``message``: its own field dict, the same field values."""
    cls = type(message)
    if cls in _FIELDS and not message.__pydantic_extra__ and not message.__pydantic_private__:
        return _message(cls, dict(message.__dict__))
    return message.model_copy()


def _constructing_messages(fallback: ExtHook) -> ExtHook:
    """An ext hook that builds known message classes itself and defers the rest."""

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_PYDANTIC_V2:
            stored = ormsgpack.unpackb(data, ext_hook=hook, option=_OPTIONS)
            cls = _MESSAGE_CLASSES.get((stored[0], stored[1]))
            fields = stored[2]
            if cls is not None and isinstance(fields, dict) and fields.keys() == _FIELDS.get(cls):
                return _message(cls, fields)
            # Another field set (written by another version): validated, as LangGraph does.
            return fallback(code, data)
        if code == EXT_DELTA_SNAPSHOT:
            # LangGraph's hook would decode the snapshot's messages with itself.
            return DeltaSnapshot(ormsgpack.unpackb(data, ext_hook=hook, option=_OPTIONS))
        return fallback(code, data)

    return hook


class CheckpointSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` whose msgpack loads rebuild stored messages unvalidated.

    Writes are LangGraph's, byte for byte, so a database written with it reads with the
    stock serializer and the other way round.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        wrap_msgpack_ext_hook(self, _constructing_messages)

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> JsonPlusSerializer:
        clone = super().with_msgpack_allowlist(extra_allowlist)
        if clone is not self:
            # The parent rebuilt its plain hook for the new allowlist.
            wrap_msgpack_ext_hook(clone, _constructing_messages)
        return clone
