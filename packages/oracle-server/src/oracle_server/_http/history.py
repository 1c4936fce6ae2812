"""Thread messages as the client reads them: ``MessageDto`` (SRV-26)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from oracle_server._turns.approvals import waiting_output

if TYPE_CHECKING:
    from oracle_server._http.state import ServerState

__all__ = ["message_id", "session_history", "to_message_dtos"]


def message_id(message: BaseMessage) -> str:
    """The message id when it is a UUID, else the SHA-256 hex of its id or content."""
    raw = message.id or ""
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        return hashlib.sha256((raw or str(message.content)).encode()).hexdigest()


def _text(message: BaseMessage) -> str:
    if message.additional_kwargs.get("attachments") and isinstance(message.content, list):
        # The user's own words come first; the files' extracted text is the model's.
        first = message.content[0] if message.content else ""
        return str(first.get("text", "") if isinstance(first, dict) else first)
    return str(message.text)


def _output(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


async def session_history(
    server: ServerState, user_did: str, session_id: str
) -> list[dict[str, Any]]:
    """The session's ``MessageDto``s. A call waiting for the user's approval has no result
    yet: its ``output`` says so, so a client that reloads the history still shows it.
    (Nothing is added to the list: positions in it are the page cursors.)"""
    items = to_message_dtos(await server.runtime.thread_messages(user_did, session_id))
    approvals = server.runner.approvals
    waiting = await approvals.waiting(user_did, session_id) if approvals is not None else []
    if waiting:
        by_call = {record.tool_call_id: record for record in waiting}
        for item in items:
            for call in item.get("toolCalls", ()):
                record = by_call.get(str(call.get("id")))
                if record is not None and "output" not in call:
                    call["status"] = "done"
                    call["output"] = waiting_output(record.approval_id)
    return items


def to_message_dtos(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """``MessageDto``s: system and error messages skipped, tool results folded into the
    ``toolCalls`` entry of the AI message that called them."""
    out: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for message in messages:
        if isinstance(message, SystemMessage) or message.additional_kwargs.get("isError"):
            continue
        if isinstance(message, HumanMessage):
            out.append(_dto(message, "human"))
        elif isinstance(message, AIMessage):
            dto = _dto(message, "ai")
            if message.tool_calls:
                dto["toolCalls"] = []
                for call in message.tool_calls:
                    entry: dict[str, Any] = {
                        "name": call["name"],
                        "id": call.get("id"),
                        "args": call["args"],
                    }
                    dto["toolCalls"].append(entry)
                    if call.get("id"):
                        calls[str(call["id"])] = entry
            out.append(dto)
        elif isinstance(message, ToolMessage):
            called = calls.get(message.tool_call_id)
            if called is not None:
                called["status"] = "done"
                called["output"] = _output(message.content)
    return out


def _dto(message: BaseMessage, kind: str) -> dict[str, Any]:
    dto: dict[str, Any] = {
        "id": message_id(message),
        "type": kind,
        "content": _text(message),
        "isComplete": True,
        "isReasoning": False,
    }
    attached = message.additional_kwargs.get("attachments")
    if isinstance(attached, list) and attached:
        dto["attachments"] = [
            {k: v for k, v in item.items() if k in {"filename", "mimetype", "size", "source"}}
            for item in attached
            if isinstance(item, dict)
        ]
    return dto
