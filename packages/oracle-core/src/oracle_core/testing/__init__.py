"""Offline testing kit: scripted models, a test runtime and the plugin conformance suite.

Nothing here reads the environment or touches the network (CORE-90).
"""

from oracle_core.testing._conformance import ConformanceCheck, ConformanceReport, validate_plugin
from oracle_core.testing._files import tiny_pdf, tiny_png
from oracle_core.testing._matrix import LocalMatrixPeer, MatrixPeer, check_matrix_accessor
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
    "LocalMatrixPeer",
    "LogLeak",
    "LogScan",
    "MatrixPeer",
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
    "check_matrix_accessor",
    "create_test_runtime",
    "leaks_in",
    "mark_sensitive",
    "reply",
    "sensitive_values",
    "tiny_pdf",
    "tiny_png",
    "validate_plugin",
]
