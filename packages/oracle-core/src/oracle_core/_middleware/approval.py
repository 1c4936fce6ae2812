"""``tool-approval``: a call the tool policy marks for approval waits for the user's yes.

The call does not run. The middleware raises a LangGraph interrupt whose value is the
:class:`~oracle_core._approval.ApprovalRequest` (the arguments through the tool's
``redact_args``), so the run ends with the turn checkpointed; the host asks the user and
resumes the thread with an :class:`~oracle_core._approval.ApprovalAnswer`. On resume the
tool node runs again up to here and the interrupt returns the answer: ``approved`` runs
the call (with the user's edited arguments, if any), anything else answers it with a
"Declined by user" error, which the repetition guard then holds against a retry.

It sits after ``tool-repetition-guard`` (a retry of a declined call is refused without
asking again) and before ``tool-retry``; the middleware before it have no side effects
a resume could repeat (the guard's counts are per run, and a resume is a new run).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command, interrupt

from oracle_core._approval import (
    APPROVAL_MARK,
    ApprovalAnswer,
    ApprovalRequest,
    args_hash,
    declined_text,
)
from oracle_core._middleware._common import tool_index
from oracle_core._policy import ToolPolicy

__all__ = ["ToolApprovalMiddleware"]

Outcome = ToolMessage | Command[Any]


class ToolApprovalMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Pauses calls the policy marks ``approve`` until the user decides (plugins spec §20.2).

    Args:
        policy: The runtime's effective policy.
        exempt: Tool names outside the policy (the runtime's meta-tools).
        tools: The tool index when it is fixed (a sub-agent's); the main agent reads the
            turn's.
    """

    def __init__(
        self,
        policy: ToolPolicy,
        exempt: Iterable[str] = (),
        tools: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self._exempt = frozenset(exempt)
        self._tools = tools

    @property
    def name(self) -> str:
        """The reserved name ``tool-approval``."""
        return "tool-approval"

    def _reason(self, request: ToolCallRequest) -> str | None:
        """The rule asking for approval of this call, or ``None`` when it may just run."""
        tool_name = request.tool_call["name"]
        if tool_name in self._exempt:
            return None
        info = tool_index(self._tools, request.runtime).get(tool_name)
        verdict = self.policy.verdict(tool_name, getattr(info, "effect", None))
        return verdict.rule if verdict.action == "approve" else None

    def _ask(self, request: ToolCallRequest, reason: str) -> ApprovalAnswer:
        """Pause for the user's decision; on resume, the decision."""
        call = request.tool_call
        args = dict(call.get("args") or {})
        shown = args
        redact = getattr(getattr(request.tool, "plugin_tool", None), "redact_args", None)
        if redact is not None:
            shown = dict(redact(dict(args)))
        now = datetime.now(UTC)
        value = ApprovalRequest(
            interrupt_id="",
            tool_call_id=str(call.get("id") or ""),
            tool_name=call["name"],
            args=shown,
            args_hash=args_hash(args),
            reason=reason,
            requested_at=now,
            expires_at=now + timedelta(seconds=self.policy.approval_ttl_seconds),
        ).to_value()
        answer: ApprovalAnswer = interrupt(value, response_schema=ApprovalAnswer)
        return answer

    def _settle(self, request: ToolCallRequest, answer: ApprovalAnswer) -> Outcome | None:
        """The refusal for a call not approved; ``None`` when it is to run."""
        if answer.decision == "approved":
            return None
        call = request.tool_call
        refusal = ToolMessage(
            content=declined_text(call["name"], answer.decision, self.policy.approval_ttl_seconds),
            tool_call_id=call["id"] or "",
            name=call["name"],
            status="error",
            response_metadata={APPROVAL_MARK: answer.decision, "decided_by": answer.decided_by},
        )
        if answer.decision == "superseded" and answer.message:
            # After the refusal, so the call is answered before the user's next words.
            return Command(update={"messages": [refusal, HumanMessage(content=answer.message)]})
        return refusal

    @staticmethod
    def _edited(request: ToolCallRequest, answer: ApprovalAnswer) -> ToolCallRequest:
        if answer.edited_args is None:
            return request
        return request.override(tool_call={**request.tool_call, "args": answer.edited_args})

    @staticmethod
    def _noted(result: Outcome, answer: ApprovalAnswer) -> Outcome:
        """Tell the model the user changed the arguments before approving."""
        if answer.edited_args is None or not isinstance(result, ToolMessage):
            return result
        if not isinstance(result.content, str):
            return result
        edited = json.dumps(answer.edited_args, sort_keys=True, default=str)
        note = f"The user edited this call's arguments before approving it; it ran with {edited}."
        return result.model_copy(update={"content": f"{note}\n\n{result.content}"})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Outcome],
    ) -> Outcome:
        """Run the call, or pause it for approval and act on the decision."""
        reason = self._reason(request)
        if reason is None:
            return handler(request)
        answer = self._ask(request, reason)
        refused = self._settle(request, answer)
        if refused is not None:
            return refused
        return self._noted(handler(self._edited(request, answer)), answer)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Outcome]],
    ) -> Outcome:
        """Async form of ``wrap_tool_call``."""
        reason = self._reason(request)
        if reason is None:
            return await handler(request)
        answer = self._ask(request, reason)
        refused = self._settle(request, answer)
        if refused is not None:
            return refused
        return self._noted(await handler(self._edited(request, answer)), answer)
