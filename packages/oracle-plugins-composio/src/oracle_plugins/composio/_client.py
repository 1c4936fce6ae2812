"""HTTP to the IXO composio-worker, which fronts Composio's Tool Router REST API.

The routes are the Tool Router's, which the TypeScript runtime reaches through the
Composio SDK pointed at the worker (``baseURL = COMPOSIO_BASE_URL``):

- ``POST {base}/api/v3/tool_router/session`` ``{"user_id": <user DID>}`` →
  ``{"session_id", …}``: the user's session (the worker derives a composite user id from
  the user and oracle DIDs of the invocation);
- ``GET {base}/api/v3/tool_router/session/{id}/tools`` → ``{"items": [{"slug",
  "description", "input_parameters", …}]}``: the session's meta-tools with their schemas;
- ``POST {base}/api/v3/tool_router/session/{id}/execute_meta`` ``{"slug", "arguments"}``
  → ``{"data", "error", "log_id"}``: runs one meta-tool.

Every request carries ``x-api-key``, ``x-ixo-network`` (when ``NETWORK`` is set) and
``x-ucan-invocation``. The worker keeps invocations single-use, so each request gets its
own (the caller mints them). Failures are ``WorkerError`` with a stable code and a
message fit for the model; nothing here logs a key, an invocation or user data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

__all__ = [
    "API_PREFIX",
    "MetaToolDefinition",
    "WorkerClient",
    "WorkerError",
    "WorkerSession",
]

API_PREFIX = "/api/v3/tool_router"
"""Where the worker serves the Tool Router routes (the Composio API's own paths)."""

_MESSAGE_CHARS = 500
_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class MetaToolDefinition:
    """One tool a session lists: its slug, description and input JSON schema."""

    slug: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class WorkerSession:
    """A user's Tool Router session and the tools it listed."""

    session_id: str
    tools: tuple[MetaToolDefinition, ...]


class WorkerError(Exception):
    """A worker request that failed.

    Attributes:
        code: Stable code: ``composio.unreachable``, ``composio.timeout``,
            ``composio.unauthorised``, ``composio.session_gone``, ``composio.rejected``,
            ``composio.busy``, ``composio.worker_error`` or ``composio.bad_response``.
        message: What went wrong, fit to show the model (no secrets, no user data).
        status: The HTTP status, when there was an answer.
    """

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status

    def as_tool_error(self) -> dict[str, Any]:
        """The ``{ok: False, code, error}`` a tool returns to the model."""
        return {"ok": False, "code": self.code, "error": self.message}


class WorkerClient:
    """The three worker routes the plugin uses, for one configuration.

    Args:
        http: The shared HTTP client.
        base_url: ``COMPOSIO_BASE_URL`` (no trailing slash).
        api_key: ``COMPOSIO_API_KEY``.
        network: ``NETWORK``, sent as ``x-ixo-network`` when set.
        request_timeout: Seconds for session creation and the tool listing.
        execute_timeout: Seconds for one meta-tool execution.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        api_key: str,
        network: str | None,
        request_timeout: float,
        execute_timeout: float,
    ) -> None:
        self._http = http
        self._base = base_url + API_PREFIX
        self._static = {"x-api-key": api_key, **({"x-ixo-network": network} if network else {})}
        self._request_timeout = request_timeout
        self._execute_timeout = execute_timeout

    async def create_session(self, user_did: str, invocation: str) -> str:
        """A new session of the user; returns its id."""
        body = await self._send(
            "POST", "/session", invocation, {"user_id": user_did}, self._request_timeout
        )
        session_id = body.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise WorkerError("composio.bad_response", "the session answer has no session_id")
        return session_id

    async def list_tools(self, session_id: str, invocation: str) -> tuple[MetaToolDefinition, ...]:
        """The tools the session lists, with their schemas (malformed entries skipped)."""
        body = await self._send(
            "GET", f"/session/{quote(session_id, safe='')}/tools", invocation, None,
            self._request_timeout,
        )  # fmt: skip
        items = body.get("items")
        if not isinstance(items, list):
            raise WorkerError("composio.bad_response", "the tool listing has no items")
        tools: list[MetaToolDefinition] = []
        for item in items:
            if not isinstance(item, Mapping) or not isinstance(item.get("slug"), str):
                continue
            schema = item.get("input_parameters")
            description = item.get("description")
            tools.append(
                MetaToolDefinition(
                    slug=item["slug"],
                    description=description if isinstance(description, str) else "",
                    input_schema=dict(schema) if isinstance(schema, Mapping) else _EMPTY_SCHEMA,
                )
            )
        return tuple(tools)

    async def execute_meta(
        self, session_id: str, slug: str, arguments: Mapping[str, Any], invocation: str
    ) -> Mapping[str, Any]:
        """Run meta-tool ``slug``; returns the worker's ``{data, error, log_id}``."""
        return await self._send(
            "POST",
            f"/session/{quote(session_id, safe='')}/execute_meta",
            invocation,
            {"slug": slug, "arguments": dict(arguments)},
            self._execute_timeout,
        )

    async def _send(
        self,
        method: str,
        path: str,
        invocation: str,
        payload: Mapping[str, Any] | None,
        seconds: float,
    ) -> Mapping[str, Any]:
        headers = {**self._static, "x-ucan-invocation": invocation}
        try:
            response = await self._http.request(
                method, self._base + path, headers=headers, json=payload, timeout=seconds
            )
        except httpx.TimeoutException as exc:
            raise WorkerError(
                "composio.timeout",
                f"the composio worker did not answer within {seconds:g} s; "
                "an action may still complete",
            ) from exc
        except httpx.HTTPError as exc:
            raise WorkerError(
                "composio.unreachable",
                f"the composio worker is unreachable ({type(exc).__name__})",
            ) from exc
        if response.status_code >= 400:
            raise _status_error(response)
        try:
            body = response.json()
        except ValueError as exc:
            raise WorkerError(
                "composio.bad_response", "the worker's answer is not JSON", status=200
            ) from exc
        if not isinstance(body, Mapping):
            raise WorkerError("composio.bad_response", "the worker's answer is not an object")
        return body


def _status_error(response: httpx.Response) -> WorkerError:
    status = response.status_code
    detail = _detail(response)
    if status in (401, 403):
        return WorkerError(
            "composio.unauthorised",
            f"the composio worker refused the authorisation ({status}){detail}",
            status=status,
        )
    if status in (404, 410):
        return WorkerError(
            "composio.session_gone", f"the Composio session is gone ({status})", status=status
        )
    if status == 429:
        return WorkerError("composio.busy", "the composio worker is busy; try later", status=429)
    if status >= 500:
        return WorkerError(
            "composio.worker_error", f"the composio worker failed ({status})", status=status
        )
    return WorkerError("composio.rejected", f"Composio refused the call{detail}", status=status)


def _detail(response: httpx.Response) -> str:
    """``": <the worker's message>"``, or empty when it gave none."""
    try:
        body = response.json()
    except ValueError:
        return ""
    message: Any = None
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or body.get("message") or body.get("detail")
    if not isinstance(message, str) or not message.strip():
        return ""
    return ": " + message.strip()[:_MESSAGE_CHARS]
