"""Offline testing kit: scripted models, a test runtime and the plugin conformance suite.

Nothing here reads the environment or touches the network (CORE-90).
"""

from oracle_core.testing._conformance import ConformanceCheck, ConformanceReport, validate_plugin
from oracle_core.testing._runtime import (
    RecordingMatrixService,
    TestRuntime,
    TurnResult,
    create_test_runtime,
)
from oracle_core.testing._scripted import (
    RecordedCall,
    ScriptedChatModel,
    ScriptExhaustedError,
    Step,
    ToolNotVisibleError,
    call_tool,
    call_tools,
    reply,
)
from oracle_core.testing._secrets import (
    SECRET_PATTERNS,
    LogLeak,
    LogScan,
    leaks_in,
    mark_sensitive,
    sensitive_values,
)

__all__ = [
    "SECRET_PATTERNS",
    "ConformanceCheck",
    "ConformanceReport",
    "LogLeak",
    "LogScan",
    "RecordedCall",
    "RecordingMatrixService",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "Step",
    "TestRuntime",
    "ToolNotVisibleError",
    "TurnResult",
    "call_tool",
    "call_tools",
    "create_test_runtime",
    "leaks_in",
    "mark_sensitive",
    "reply",
    "sensitive_values",
    "validate_plugin",
]
