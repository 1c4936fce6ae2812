"""Human approval of tool calls (plugins spec §20.2): the request, the answer, the reply.

A call to a tool the policy marks ``approve`` does not run: the ``tool-approval``
middleware pauses the turn with a LangGraph interrupt whose value is a
:class:`ApprovalRequest` as plain data, and the turn is checkpointed. The host shows it
to the user (``tool_approval_request``) and resumes the thread with
``TurnRequest(resume={interrupt_id: answer})``, where ``answer`` is an
:class:`ApprovalAnswer` as plain data. LangGraph checks the answer against that model
before anything is saved, so a malformed one leaves the approval pending.

What the model gets back: the tool's result when approved (with a note when the user
edited the arguments), and otherwise an error tool message starting "Declined by user";
the repetition guard refuses the same call again in that turn.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "APPROVAL_MARK",
    "APPROVAL_REQUEST_TYPE",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Decision",
    "approval_requests",
    "args_hash",
    "classify_reply",
    "declined_text",
]

APPROVAL_REQUEST_TYPE = "tool_approval"
"""The ``type`` of an approval interrupt's value (other interrupts are not approvals)."""
APPROVAL_MARK = "oracle_approval"
"""``response_metadata`` key of the tool message that answers a call the user did not
approve; its value is the decision (``declined``, ``expired``, ``superseded``)."""

Decision = Literal["approved", "declined", "expired", "superseded"]
"""``approved`` runs the call; ``declined`` (the user said no), ``expired`` (no answer in
time) and ``superseded`` (the user sent another message instead) do not."""


def args_hash(args: Mapping[str, Any]) -> str:
    """``sha256:`` hex of the arguments as canonical JSON (sorted keys, no spaces): what the
    audit records instead of the arguments themselves."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class ApprovalAnswer(BaseModel):
    """The user's decision on one approval request: the value a thread resumes with.

    Attributes:
        decision: See :data:`Decision`.
        edited_args: Arguments to run the call with instead of the model's (``approved``
            only); the tool validates them as it would the model's.
        message: With ``superseded``: the user's new message, added to the thread after
            the refusal so the model answers it.
        decided_by: Who decided (a DID), recorded in the refusal's metadata.
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    decision: Decision
    edited_args: dict[str, Any] | None = None
    message: str | None = Field(None, max_length=100_000)
    decided_by: str | None = None


@dataclass(frozen=True)
class ApprovalRequest:
    """A paused call waiting for the user's decision (the interrupt's value, parsed).

    Attributes:
        interrupt_id: LangGraph's id of the interrupt: the key to resume it with.
        tool_call_id: The model's id of the call.
        tool_name: The tool as bound.
        args: The arguments as shown to the user (through the tool's ``redact_args``).
        args_hash: :func:`args_hash` of the model's arguments, unredacted.
        reason: The policy rule that asked for approval (``effect destructive``, …).
        requested_at: When the call was paused (UTC).
        expires_at: When an unanswered request counts as declined (UTC).
    """

    interrupt_id: str
    tool_call_id: str
    tool_name: str
    args: Mapping[str, Any]
    args_hash: str
    reason: str
    requested_at: datetime
    expires_at: datetime

    @classmethod
    def from_interrupt(cls, interrupt: Any) -> ApprovalRequest | None:
        """The approval request an interrupt carries, or ``None`` for another interrupt."""
        value = getattr(interrupt, "value", None)
        if not isinstance(value, Mapping) or value.get("type") != APPROVAL_REQUEST_TYPE:
            return None
        return cls(
            interrupt_id=str(interrupt.id),
            tool_call_id=str(value["toolCallId"]),
            tool_name=str(value["toolName"]),
            args=dict(value.get("args") or {}),
            args_hash=str(value["argsHash"]),
            reason=str(value.get("reason") or ""),
            requested_at=datetime.fromisoformat(str(value["requestedAt"])),
            expires_at=datetime.fromisoformat(str(value["expiresAt"])),
        )

    def expired(self, now: datetime | None = None) -> bool:
        """Whether the request has passed its expiry."""
        return (now or datetime.now(UTC)) >= self.expires_at

    def to_value(self) -> dict[str, Any]:
        """The interrupt value (without the id, which LangGraph assigns)."""
        return {
            "type": APPROVAL_REQUEST_TYPE,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "args": dict(self.args),
            "argsHash": self.args_hash,
            "reason": self.reason,
            "requestedAt": self.requested_at.isoformat(),
            "expiresAt": self.expires_at.isoformat(),
        }


def approval_requests(interrupts: Iterable[Any]) -> list[ApprovalRequest]:
    """The approval requests among a run's or a thread's interrupts, in order."""
    found = (ApprovalRequest.from_interrupt(item) for item in interrupts)
    return [request for request in found if request is not None]


def declined_text(tool_name: str, decision: Decision, ttl_seconds: int | None = None) -> str:
    """The tool message the model gets for a call the user did not approve."""
    if decision == "expired":
        waited = f" within {ttl_seconds // 60} minutes" if ttl_seconds else ""
        why = f"the approval request was not answered{waited}"
    elif decision == "superseded":
        why = "the user sent a new message instead of approving it"
    else:
        why = "the user declined it"
    return (
        f"Declined by user: '{tool_name}' was not run ({why}). Do not call it again with "
        "these arguments in this turn; tell the user it was not done, or ask what they "
        "want instead."
    )


_YES = frozenset(
    [
        "yes",
        "y",
        "yeah",
        "yep",
        "yup",
        "sure",
        "ok",
        "okay",
        "approve",
        "approved",
        "confirm",
        "confirmed",
        "go",
        "proceed",
        "do",
        "allow",
        "accept",
    ]
)
_NO = frozenset(
    [
        "no",
        "n",
        "nope",
        "nah",
        "decline",
        "declined",
        "deny",
        "denied",
        "reject",
        "cancel",
        "stop",
        "don't",
        "dont",
    ]
)
_EXTRA = frozenset(["please", "it", "ahead", "thanks", "thank", "you"])
_WORD = re.compile(r"[a-z']+")


def classify_reply(text: str) -> Literal["approved", "declined"] | None:
    """A plain yes or no to a pending approval, or ``None`` for any other message.

    Short answers only (at most six words, like "yes please" or "no, cancel it"): a
    longer message, or one that mixes yes and no words, is a new message, not an answer.
    """
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    if not words or len(words) > 6:
        return None
    yes = any(w in _YES for w in words)
    no = any(w in _NO for w in words)
    rest = [w for w in words if w not in _YES and w not in _NO and w not in _EXTRA]
    if rest or yes == no:
        return None
    return "approved" if yes else "declined"
