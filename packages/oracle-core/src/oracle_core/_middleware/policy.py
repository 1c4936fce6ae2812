"""``tool-policy``: a call to a tool the tool policy denies is refused, naming the rule.

Denied tools are not bound in the first place (``oracle_core._policy``); this is the
defence behind that, at dispatch, for a name the model makes up or a tool bound some
other way. It runs first among the framework middleware, in the main agent and in every
sub-agent. A sub-agent cannot pause its parent's turn for the user's approval, so there it
also refuses the calls the policy marks for approval (``unapprovable``): they never run
unapproved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage

from oracle_core._middleware._common import RefusingToolMiddleware, error_tool_message
from oracle_core._policy import ToolPolicy

__all__ = ["ToolPolicyMiddleware", "approval_unavailable", "policy_refusal"]


def policy_refusal(tool_name: str, rule: str | None) -> str:
    """The tool error the model gets for a call the policy denies."""
    return (
        f"Tool '{tool_name}' is not allowed by this oracle's tool policy ({rule}), so it was"
        " not run. Do not call it again; tell the user this action is disabled here."
    )


def approval_unavailable(tool_name: str, rule: str) -> str:
    """The tool error a sub-agent gets for a call that needs the user's approval."""
    return (
        f"Tool '{tool_name}' needs the user's approval ({rule}), which cannot be asked from "
        "inside a sub-agent, so it was not run. Do not call it again; say in your answer "
        "what you wanted to do, so the user can ask for it directly."
    )


class ToolPolicyMiddleware(RefusingToolMiddleware):
    """Refuses calls to tools the policy denies (plugins spec §20.1).

    Args:
        policy: The runtime's effective policy.
        exempt: Tool names outside the policy (the runtime's meta-tools).
        unapprovable: Tools whose calls need approval where none can be asked (a
            sub-agent), by name, with the rule: refused like denied ones.
    """

    def __init__(
        self,
        policy: ToolPolicy,
        exempt: Iterable[str] = (),
        unapprovable: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self._exempt = frozenset(exempt)
        self._unapprovable = dict(unapprovable or {})

    @property
    def name(self) -> str:
        """The reserved name ``tool-policy``."""
        return "tool-policy"

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        tool_name = request.tool_call["name"]
        if tool_name in self._exempt:
            return None
        rule = self._unapprovable.get(tool_name)
        if rule is not None:
            return error_tool_message(request, approval_unavailable(tool_name, rule))
        verdict = self.policy.verdict(tool_name)
        if verdict.action != "deny":
            return None
        return error_tool_message(request, policy_refusal(tool_name, verdict.rule))
