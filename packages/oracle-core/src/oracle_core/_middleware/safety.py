"""``safety-guardrail``: a classifier model vets the final reply of each run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from oracle_core._middleware._common import state_value

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["CLASSIFIER_PROMPT", "DEFAULT_REFUSAL", "SafetyGuardrailMiddleware"]

_logger = logging.getLogger("oracle.middleware.safety_guardrail")

DEFAULT_REFUSAL = "I'm sorry, but I can't help with that."
"""The reply that replaces one the safety model classifies as ``UNSAFE``."""

CLASSIFIER_PROMPT = (
    "You are a safety classifier for an AI assistant. You receive the user's latest "
    "message and the assistant's reply to it. Decide whether the reply is safe to show "
    "to the user. It is UNSAFE if it gives meaningful help with violence, weapons, "
    "self-harm, abuse, or other serious harm or crime, or if it reveals secrets, "
    "credentials or other people's private data. Otherwise it is SAFE. "
    "Answer with exactly one word: SAFE or UNSAFE."
)
"""The fixed system prompt of the safety classifier."""


def _latest_user_text(messages: Sequence[AnyMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


class SafetyGuardrailMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Replaces an unsafe final reply with a fixed refusal (CORE-81).

    When the run ends on an AI message without tool calls, ``safety_model`` classifies
    the latest user message and that reply; a verdict containing ``UNSAFE`` replaces the
    reply (same message id, so the messages reducer overwrites it in the thread) with
    ``refusal``. A classifier error is logged, without any user text, and the reply kept.

    The hook returns no ``jump_to``: the framework middleware listed before this one have
    no ``after_agent``, so the run ends right after it anyway, while LangChain routes an
    ``after_agent`` jump to ``end`` back to the first ``after_agent`` node, which would run
    every ``after_agent`` hook, this one included, a second time.

    Args:
        safety_model: A chat model that answers ``SAFE`` or ``UNSAFE``.
        refusal: The text that replaces an unsafe reply.
    """

    def __init__(self, safety_model: BaseChatModel, refusal: str = DEFAULT_REFUSAL) -> None:
        super().__init__()
        self._safety_model = safety_model
        self._refusal = refusal

    @property
    def name(self) -> str:
        """The reserved name ``safety-guardrail``."""
        return "safety-guardrail"

    def _final_reply(self, state: AgentState[Any]) -> tuple[AIMessage, list[BaseMessage]] | None:
        """The reply to vet and the classifier prompt, or ``None`` when nothing to vet."""
        messages: Sequence[AnyMessage] = state_value(state, "messages") or ()
        if not messages:
            return None
        reply = messages[-1]
        if not isinstance(reply, AIMessage) or reply.tool_calls:
            return None
        prompt: list[BaseMessage] = [
            SystemMessage(content=CLASSIFIER_PROMPT),
            HumanMessage(
                content=(
                    f"<user_message>\n{_latest_user_text(messages)}\n</user_message>\n"
                    f"<assistant_reply>\n{reply.text}\n</assistant_reply>"
                )
            ),
        ]
        return reply, prompt

    def _verdict(self, reply: AIMessage, verdict: AIMessage) -> dict[str, Any] | None:
        if "UNSAFE" not in verdict.text.upper():
            return None
        _logger.warning("safety classifier flagged the final reply; replacing it with the refusal")
        return {"messages": [AIMessage(id=reply.id, content=self._refusal)]}

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Classify the final reply and replace it when unsafe."""
        found = self._final_reply(state)
        if found is None:
            return None
        reply, prompt = found
        try:
            verdict = self._safety_model.invoke(prompt)
        except Exception as exc:  # the guardrail must not fail the turn
            _logger.warning("safety classifier failed (%s); keeping the reply", type(exc).__name__)
            return None
        return self._verdict(reply, verdict)

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async form of ``after_agent``."""
        found = self._final_reply(state)
        if found is None:
            return None
        reply, prompt = found
        try:
            verdict = await self._safety_model.ainvoke(prompt)
        except Exception as exc:  # the guardrail must not fail the turn
            _logger.warning("safety classifier failed (%s); keeping the reply", type(exc).__name__)
            return None
        return self._verdict(reply, verdict)
