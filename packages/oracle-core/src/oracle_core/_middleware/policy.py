"""``tool-policy``: a call to a tool the tool policy denies is refused, naming the rule.

Denied tools are not bound in the first place (``oracle_core._policy``); this is the
defence behind that, at dispatch, for a name the model makes up or a tool bound some
other way. It runs first among the framework middleware, in the main agent and in every
sub-agent.
"""

from __future__ import annotations

from collections.abc import Iterable

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage

from oracle_core._middleware._common import RefusingToolMiddleware, error_tool_message
from oracle_core._policy import ToolPolicy

__all__ = ["ToolPolicyMiddleware", "policy_refusal"]


def policy_refusal(tool_name: str, rule: str | None) -> str:
    """The tool error the model gets for a call the policy denies."""
    return (
        f"Tool '{tool_name}' is not allowed by this oracle's tool policy ({rule}), so it was"
        " not run. Do not call it again; tell the user this action is disabled here."
    )


class ToolPolicyMiddleware(RefusingToolMiddleware):
    """Refuses calls to tools the policy denies (plugins spec §20.1).

    Args:
        policy: The runtime's effective policy.
        exempt: Tool names outside the policy (the runtime's meta-tools).
    """

    def __init__(self, policy: ToolPolicy, exempt: Iterable[str] = ()) -> None:
        super().__init__()
        self.policy = policy
        self._exempt = frozenset(exempt)

    @property
    def name(self) -> str:
        """The reserved name ``tool-policy``."""
        return "tool-policy"

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        tool_name = request.tool_call["name"]
        if tool_name in self._exempt:
            return None
        verdict = self.policy.verdict(tool_name)
        if verdict.action != "deny":
            return None
        return error_tool_message(request, policy_refusal(tool_name, verdict.rule))
