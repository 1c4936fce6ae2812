"""``/a2a``: the oracle as an Agent2Agent agent, on the ``a2a-sdk`` (off unless ``ORACLE_A2A``).

- The agent card is public at ``/.well-known/agent-card.json``: the oracle's name and
  description, one skill per plugin shown in the Tier-1 prompt (not ``silent``), streaming
  on, JSON-RPC at ``<this server>/a2a`` for A2A 1.0 and 0.3 (``message/send``,
  ``message/stream``, ``tasks/get``, ``tasks/resubscribe`` beside ``SendMessage``…).
- ``POST /a2a`` sits behind the pipeline like ``/messages``: the caller's UCAN headers are
  checked before the SDK sees the request, the subscription gate applies, and each message
  spends a turn from the caller's ``turns`` budget.
- A message runs a normal turn for the caller through the turn runner (session lock,
  run log, bookkeeping, tool policy and approvals). The A2A ``contextId`` is the oracle
  session: a message naming one of the caller's sessions continues it; any other (or
  none) starts a new session, whose id the task carries as its ``contextId``.
- Each task is one run: its first ``working`` status carries ``runId`` and ``sessionId``
  in its metadata, the reply streams as one ``reply`` artifact, and the run's end
  completes, cancels or fails the task. ``GET /runs/{runId}`` rejoins it like any run;
  ``tasks/resubscribe`` does while it runs. Tasks are kept by the SDK's in-memory store,
  per caller, on the replica that ran them (see docs/oracle-server.md).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from a2a.auth.user import User
from a2a.helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, InvalidRequestError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import AuthExcludedRoute
from oracle_server._auth.authenticator import AuthData
from oracle_server._errors import HTTPError
from oracle_server._http.routing import LimitedRoute, RouteLimits
from oracle_server._turns.runlog import RunGone
from oracle_server._turns.runner import TurnInput

if TYPE_CHECKING:
    from oracle_server._http.state import ServerState

__all__ = ["A2A_PATH", "CARD_PATH", "A2aEndpoint"]

A2A_PATH = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"
READ_WAIT_SECONDS = 15.0
ARTIFACT = "reply"
MESSAGE_BODY_BYTES = 256 * 1024


class _Caller(User):
    """The authenticated caller as the SDK sees it: tasks are kept per ``user_name``."""

    def __init__(self, did: str) -> None:
        self.did = did

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.did


class _CallContexts(DefaultServerCallContextBuilder):
    """Hands the pipeline's authenticated caller to the executor."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["oracle_auth"] = _auth(request)
        return context

    def build_user(self, request: Request) -> User:
        return _Caller(_auth(request).did)


def _auth(request: Request) -> AuthData:
    auth = request.scope.get("state", {}).get("auth")
    if not isinstance(auth, AuthData):  # the pipeline authenticates every /a2a request
        raise InvalidRequestError(message="not authenticated")
    return auth


class _SessionContexts(SimpleRequestContextBuilder):
    """A new task's ``contextId`` is one of the caller's sessions, made when needed."""

    def __init__(self, state: ServerState) -> None:
        super().__init__()
        self.state = state

    async def build(
        self,
        context: Any,
        params: Any = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Any = None,
    ) -> RequestContext:
        if task is None and isinstance(context, ServerCallContext):
            auth: AuthData = context.state["oracle_auth"]
            asked = context_id or (params.message.context_id if params is not None else "")
            sessions = self.state.sessions
            if not asked or await sessions.get(auth.did, asked) is None:
                asked = (await self.state.new_session(auth.did)).session_id
            context_id = asked
        return await super().build(context, params, task_id, context_id, task)


class _TurnExecutor(AgentExecutor):
    """Runs each A2A message as a turn and streams the run into the task."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = context.call_context
        assert call is not None
        assert context.task_id
        assert context.context_id
        auth: AuthData = call.state["oracle_auth"]
        text = context.get_user_input()
        if not text.strip():
            raise InvalidParamsError(message="the message has no text part")
        retry_after = await self.state.spend_turn(auth.did)
        if retry_after is not None:
            raise InvalidRequestError(message=f"Too many turns: try again in {retry_after} s")
        if context.current_task is None:
            history = [context.message] if context.message is not None else []
            task = new_task(
                context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=history
            )
            await event_queue.enqueue_event(task)
        try:
            turn = await self.state.runner.start(
                TurnInput(
                    auth=auth,
                    session_id=context.context_id,
                    message=text,
                    request_id=context.task_id,
                )
            )
        except HTTPError as exc:  # the session's policy refused a second turn
            raise InvalidRequestError(message=str(exc.message)) from exc
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(
            TaskState.TASK_STATE_WORKING,
            metadata={"runId": turn.run_id, "sessionId": context.context_id},
        )
        status, error = await self._stream(turn.run_id, updater)
        if status == "finished":
            await updater.complete()
        elif status == "aborted":
            await updater.cancel()
        else:
            await updater.failed(self._message(context, error or f"The turn ended {status}."))

    async def _stream(self, run_id: str, updater: TaskUpdater) -> tuple[str, str | None]:
        """The run's reply as artifact chunks, to its ``done``: (status, error text)."""
        runs = self.state.runner.runs
        after, held, sent, error = 0, "", False, None
        while True:
            try:
                events = await runs.read(run_id, after, wait=READ_WAIT_SECONDS)
            except RunGone:
                return "interrupted", "The run's events are no longer available."
            for event in events:
                after = event.seq
                data = event.payload()
                if event.event == "message" and data.get("content"):
                    if held:
                        await updater.add_artifact(
                            [Part(text=held)], artifact_id=ARTIFACT, name=ARTIFACT, append=sent
                        )
                        sent = True
                    held = str(data["content"])
                elif event.event == "error":
                    error = str(data.get("error") or "")
                elif event.event == "done":
                    if held:
                        await updater.add_artifact(
                            [Part(text=held)],
                            artifact_id=ARTIFACT,
                            name=ARTIFACT,
                            append=sent,
                            last_chunk=True,
                        )
                    return str(data.get("status") or "failed"), error

    @staticmethod
    def _message(context: RequestContext, text: str) -> Message:
        return Message(
            role=Role.ROLE_AGENT,
            message_id=str(uuid.uuid4()),
            context_id=context.context_id or "",
            task_id=context.task_id or "",
            parts=[Part(text=text)],
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = context.call_context
        if call is not None and context.context_id:
            auth: AuthData = call.state["oracle_auth"]
            await self.state.runner.abort(auth.did, context.context_id)


class A2aEndpoint:
    """The agent card and the JSON-RPC endpoint.

    Args:
        state: The booted server.
    """

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.handler = DefaultRequestHandler(
            agent_executor=_TurnExecutor(state),
            task_store=InMemoryTaskStore(),
            # The handler keeps a card of its own; the one served is built per request
            # (`_card`), its endpoint under the base URL the caller used.
            agent_card=self.card("http://localhost"),
            request_context_builder=_SessionContexts(state),
        )
        self.dispatcher = JsonRpcDispatcher(
            self.handler, context_builder=_CallContexts(), enable_v0_3_compat=True
        )

    def card(self, base_url: str) -> AgentCard:
        """The agent card, its endpoint under ``base_url``."""
        runtime = self.state.runtime
        identity = runtime.identity
        url = f"{base_url.rstrip('/')}{A2A_PATH}"
        skills = [
            AgentSkill(
                id=name,
                name=manifest.title,
                description=manifest.summary,
                tags=list(manifest.tags) or [manifest.category or "general"],
                examples=list(manifest.when_to_use),
            )
            for name, manifest in runtime.registries.manifests.items()
            if manifest.visibility != "silent"
        ]
        return AgentCard(
            name=identity.name,
            description=identity.description or f"{identity.name}, an oracle.",
            version=version("oracle-server"),
            supported_interfaces=[
                AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
                AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
            ],
            capabilities=AgentCapabilities(streaming=True, push_notifications=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=skills,
        )

    async def _card(self, request: Request) -> Response:
        return JSONResponse(agent_card_to_dict(self.card(str(request.base_url))))

    async def _rpc(self, request: Request) -> Response:
        return await self.dispatcher.handle_requests(request)

    def routes(self) -> list[BaseRoute]:
        """``GET /.well-known/agent-card.json`` and ``POST /a2a``."""
        return [
            Route(CARD_PATH, self._card, methods=["GET"], include_in_schema=False),
            LimitedRoute(
                A2A_PATH,
                self._rpc,
                methods=["POST"],
                limits=RouteLimits(max_body_bytes=MESSAGE_BODY_BYTES),
                include_in_schema=False,
            ),
        ]

    @staticmethod
    def public_routes() -> list[AuthExcludedRoute]:
        """The card is public, as A2A discovery expects."""
        return [AuthExcludedRoute(CARD_PATH, "GET")]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Drain running tasks at shutdown."""
        try:
            yield
        finally:
            await self.handler.aclose()
