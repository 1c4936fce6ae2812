"""Error types of the runtime, each with a stable code and, where it helps, a fix hint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "CapabilityDeniedError",
    "EnvValidationError",
    "ManifestValidationError",
    "MiddlewareContractError",
    "NotConfiguredError",
    "OracleBootError",
    "OracleConfigError",
    "OracleError",
    "RouteContextError",
    "RouteError",
    "ServiceUnavailableError",
    "UnknownModelRoleError",
]


class OracleError(Exception):
    """Base of every error the runtime raises on purpose.

    Attributes:
        code: Stable machine-readable code (Appendix A of the core spec).
        hint: How to fix it, when there is an obvious fix.
    """

    code: str = "oracle.error"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.hint = hint
        self.message = message
        super().__init__(f"{message}; {hint}" if hint else message)


class OracleBootError(OracleError):
    """The runtime could not boot. ``code`` is one of the ``boot.*`` codes."""

    code = "boot.error"


class OracleConfigError(OracleBootError):
    """The ``OracleConfig`` passed to ``create_runtime`` is missing or invalid."""

    code = "boot.config.invalid"


class ManifestValidationError(OracleBootError):
    """One or more plugin manifests broke a hard rule; ``errors`` lists every message."""

    code = "boot.manifest.invalid"

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__(
            "Plugin manifest validation failed:\n" + "\n".join(f"  {e}" for e in self.errors)
        )


class EnvValidationError(OracleBootError):
    """Environment validation failed; ``errors`` has one line per variable."""

    code = "boot.config.invalid"

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("Environment validation failed:\n" + "\n".join(self.errors))


class MiddlewareContractError(OracleError):
    """A plugin middleware node hook returned something other than ``None`` or a jump to end."""

    code = "turn.middleware.contract"

    def __init__(self, *, plugin: str, middleware: str, hook: str, keys: Sequence[str]) -> None:
        self.plugin = plugin
        self.middleware = middleware
        self.hook = hook
        self.keys = tuple(keys)
        super().__init__(
            f"plugin '{plugin}' middleware '{middleware}' returned state keys "
            f"{sorted(self.keys)} from {hook}",
            hint="plugin middleware may only return None or {'jump_to': 'end'}; "
            "change state through tool Commands or get_turn_state",
        )


class CapabilityDeniedError(OracleError):
    """The user holds no UCAN grant for the resource and action."""

    code = "ucan.capability_denied"

    def __init__(self, resource: str, action: str) -> None:
        self.resource = resource
        self.action = action
        super().__init__(f"capability '{action}' on '{resource}' was not granted")


class NotConfiguredError(OracleError):
    """An ambient service was used that this deployment does not configure."""

    code = "service.not_configured"


class RouteContextError(OracleError):
    """``route_context`` found no runtime or no authenticated user on the request.

    ``code`` is ``route.no_runtime`` (the app serving the request exposes no oracle
    runtime: a deployment error) or ``route.unauthenticated`` (no authenticated user:
    answer 401).
    """

    code = "route.no_runtime"


class RouteError(OracleError):
    """Raised by a plugin route handler to refuse the request.

    The host answers it in the client's error shape (``{statusCode, message, error,
    requestId, code}``) with ``status`` and ``headers``, so every plugin route's errors read
    like the server's own. A ``RouteContextError`` escaping a handler is answered the same
    way: 401 for ``route.unauthenticated``, 500 for ``route.no_runtime``.
    """

    code = "route.error"

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"a route error's status is 4xx or 5xx, not {status}")
        super().__init__(message, code=code)
        self.status = status
        self.headers = dict(headers or {})


class ServiceUnavailableError(OracleError):
    """An ambient service exists but cannot be reached in this backend or right now."""

    code = "service.unavailable"


class UnknownModelRoleError(OracleError):
    """The active provider maps no model to the requested role."""

    code = "llm.unknown_role"
