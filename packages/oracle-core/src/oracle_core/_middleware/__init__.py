"""The framework middleware of the main agent and the contract for plugin middleware.

``create_agent`` receives them in the order of CORE-76, after ``tool-policy`` (plugins spec
§20.1, which refuses calls to denied tools): ``capability-gate``,
``tool-validation``, ``tool-repetition-guard``, ``tool-approval`` (§20.2, which pauses
calls that need the user's approval), ``tool-retry``, then ``page-context`` and
``safety-guardrail`` when their host hooks are set, then ``current-time`` and
``history-condenser``, then plugin
middleware wrapped by ``wrap_plugin_middleware``. The first ``wrap_*`` hook in the list is
the outermost. Consecutive framework middleware with only ``wrap_*`` hooks reach
``create_agent`` folded into one ``FrameworkChain`` (``chain.py``), in the same order.
"""

from __future__ import annotations

from oracle_core._middleware.approval import ToolApprovalMiddleware
from oracle_core._middleware.condense import HistoryCondenserMiddleware, HistorySummary
from oracle_core._middleware.contract import (
    RESERVED_MIDDLEWARE_NAMES,
    check_plugin_middleware,
    wrap_plugin_middleware,
)
from oracle_core._middleware.current_time import CurrentTimeMiddleware
from oracle_core._middleware.gate import CapabilityGateMiddleware
from oracle_core._middleware.page_context import PageContextMiddleware
from oracle_core._middleware.policy import ToolPolicyMiddleware
from oracle_core._middleware.repetition import ToolRepetitionGuardMiddleware
from oracle_core._middleware.retry import EffectAwareToolRetryMiddleware, ToolRetryMiddleware
from oracle_core._middleware.safety import DEFAULT_REFUSAL, SafetyGuardrailMiddleware
from oracle_core._middleware.validation import ToolValidationMiddleware

__all__ = [
    "DEFAULT_REFUSAL",
    "RESERVED_MIDDLEWARE_NAMES",
    "CapabilityGateMiddleware",
    "CurrentTimeMiddleware",
    "EffectAwareToolRetryMiddleware",
    "HistoryCondenserMiddleware",
    "HistorySummary",
    "PageContextMiddleware",
    "SafetyGuardrailMiddleware",
    "ToolApprovalMiddleware",
    "ToolPolicyMiddleware",
    "ToolRepetitionGuardMiddleware",
    "ToolRetryMiddleware",
    "ToolValidationMiddleware",
    "check_plugin_middleware",
    "wrap_plugin_middleware",
]
