"""The embedded sandbox: code and skills run in isolation on one machine.

The oracle itself never runs model-written code. This separate distribution does, each
run in a bubblewrap sandbox with no network, a read-only system, the user's persistent
``/workspace/data``, a tmpfs ``/tmp``, resource limits and a wall clock
(:class:`BubblewrapSandbox`).
"""

from oracle_sandbox._isolation import (
    BubblewrapSandbox,
    RunResult,
    SandboxFileError,
    SandboxLimits,
    SandboxUnavailableError,
    bubblewrap_path,
)
from oracle_sandbox._server import USER_HEADER, sandbox_app, serve_sandbox

__all__ = [
    "USER_HEADER",
    "BubblewrapSandbox",
    "RunResult",
    "SandboxFileError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "bubblewrap_path",
    "sandbox_app",
    "serve_sandbox",
]
