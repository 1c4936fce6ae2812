"""The socket.io gateway (SRV-47 … 53): handshake, a room per session, events both ways.

python-socketio's ASGI app wraps the Starlette app: ``/socket.io/`` goes to the gateway,
everything else to Starlette, so socket traffic never enters the HTTP pipeline (SRV-39).

- Handshake: ``query.sessionId`` and ``auth.invocation`` / ``auth.ucanDelegation``,
  checked like the HTTP headers; the session must belong to the caller. The socket then
  joins the room named after the session.
- Server → client: plugin events (``rt_ctx.emit``) reach the session's room; the frontend
  round trips (``call_browser_tool``, ``call_action``) go to one socket of the session
  (:mod:`~oracle_server._socket.rooms`) and wait for that socket's answer.
- Delivery is fire-and-forget: nothing is buffered for sockets that join later.
- Several replicas (``SOCKETIO_MESSAGE_QUEUE``, SRV-54): rooms span the replicas through
  python-socketio's ``AsyncRedisManager``, and a client result for a call that another
  replica waits for is forwarded on the :class:`~oracle_server._replicas.base.ReplicaBus`.
  A call whose session has no socket on the turn's replica goes to the session's room,
  where the first answer from any of its sockets settles it. Without a queue nothing of
  this runs: rooms and results stay in this process.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, cast
from urllib.parse import parse_qs

import socketio  # type: ignore[import-untyped]
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oracle_core import (
    SESSION_EVENT_KINDS,
    FrontendAccessor,
    FrontendCallError,
    FrontendCallKind,
    OracleEvent,
    SessionInfo,
    UserInfo,
    frontend_outcome,
)
from oracle_server._auth.authenticator import Authenticator
from oracle_server._errors import HTTPError
from oracle_server._http.ratelimit import RateLimiter
from oracle_server._persistence import Sessions
from oracle_server._replicas.base import ReplicaBus
from oracle_server._settings import ServerSettings
from oracle_server._socket.calls import CallKind, PendingCalls
from oracle_server._socket.protocol import (
    CLIENT_EVENTS,
    SERVER_EVENTS,
    BoundSocket,
    handshake_headers,
    socket_message,
)
from oracle_server._socket.rooms import SessionSockets
from oracle_server._socket.throttle import HandshakeThrottle, UpgradeThrottle
from oracle_server._timestamps import timestamp

__all__ = [
    "MAX_FRAME_BYTES",
    "SOCKETIO_CHANNEL",
    "SOCKETIO_PATH",
    "SocketGateway",
]

logger = logging.getLogger("oracle.server.ws")

SOCKETIO_PATH = "socket.io"
SOCKETIO_CHANNEL = "oracle:socketio"
"""The Redis channel of the rooms (python-socketio's default, ``socketio``, is not
prefixed, and deployments may share a Redis)."""
MAX_FRAME_BYTES = 1024 * 1024
REFUSED = "unauthorized"
SHUTTING_DOWN = "Server shutting down"


def user_room(did: str) -> str:
    """The room of every socket of ``did`` (session rooms are named by session id)."""
    return f"user:{did}"


SessionIdleHandler = Callable[[str, str], Awaitable[None] | None]
"""``(session_id, user_did)``, called when the last socket of a session disconnects."""


def _query_value(environ: Mapping[str, Any], key: str) -> str:
    values = parse_qs(str(environ.get("QUERY_STRING") or "")).get(key) or [""]
    return values[0].strip()


class SocketGateway:
    """The socket.io server of the oracle.

    Args:
        settings: ``CORS_ORIGIN``, ``FRONTEND_TOOL_TIMEOUT_MS`` and the handshake limit
            (``SOCKET_HANDSHAKE_LIMIT`` per ``SOCKET_HANDSHAKE_WINDOW_SECONDS``).
        sessions: Where handshakes check that the session belongs to the caller.
        authenticator: Validates the handshake's UCANs; until one is attached every
            handshake is refused.
        bus: The replicas' control bus (with ``SOCKETIO_MESSAGE_QUEUE``): client results
            for calls this replica does not wait for are forwarded on it, and results
            forwarded by other replicas settle the calls waiting here.
        limiter: Counts each IP's handshakes, before any is authenticated; without
            one handshakes are not throttled.
        rooms: A python-socketio client manager whose rooms span processes (the
            workers' hub); it takes the place of ``SOCKETIO_MESSAGE_QUEUE``'s Redis
            manager. With one, sockets connect over WebSocket only: Engine.IO's polling
            needs every request of a socket to reach one process, which workers sharing a
            port cannot promise.

    Attributes:
        sio: The python-socketio ``AsyncServer``.
    """

    def __init__(
        self,
        settings: ServerSettings,
        sessions: Sessions,
        *,
        authenticator: Authenticator | None = None,
        bus: ReplicaBus | None = None,
        limiter: RateLimiter | None = None,
        rooms: Any | None = None,
    ) -> None:
        origins = settings.cors_origins()
        any_origin = origins == ["*"]
        self.settings = settings
        self.sessions = sessions
        self.authenticator = authenticator
        self.bus = bus
        self._throttle = None if limiter is None else HandshakeThrottle(limiter, settings)
        queue = settings.socketio_message_queue
        transports: dict[str, Any] = {}
        if rooms is not None:
            transports["transports"] = ["websocket"]
        elif queue:
            rooms = socketio.AsyncRedisManager(queue, channel=SOCKETIO_CHANNEL)
        self._shared_rooms = rooms is not None
        self.sio: Any = socketio.AsyncServer(
            client_manager=rooms,
            **transports,
            async_mode="asgi",
            cors_allowed_origins="*" if any_origin else origins,
            cors_credentials=not any_origin,
            max_http_buffer_size=MAX_FRAME_BYTES,
            logger=False,
            engineio_logger=False,
        )
        self._sockets: dict[str, BoundSocket] = {}
        self._rooms = SessionSockets()
        self._pending = PendingCalls()
        self._idle_handlers: list[SessionIdleHandler] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        handlers: dict[str, Callable[..., Awaitable[None]]] = {
            "connect": self._on_connect,
            "disconnect": self._on_disconnect,
            "ping": self._on_ping,
            "status": self._on_status,
            "subscribe": self._on_subscribe,
            "list-events": self._on_list_events,
            "tool_result": self._on_tool_result,
            "action_call_result": self._on_action_call_result,
        }
        for name, handler in handlers.items():
            self.sio.on(name, handler)
        if bus is not None:
            bus.handle_settle(self._settle_forwarded)

    # -- wiring -----------------------------------------------------------------------

    def asgi_app(self, other: ASGIApp) -> ASGIApp:
        """``other`` with ``/socket.io/`` served by this gateway.

        The gateway's own shutdown (pending calls failed, sockets closed) runs when the
        ASGI lifespan shuts down, before ``other`` hears of it.
        """
        app: ASGIApp = cast(
            ASGIApp,
            socketio.ASGIApp(self.sio, other_asgi_app=other, socketio_path=SOCKETIO_PATH),
        )
        if self._throttle is not None:
            app = UpgradeThrottle(app, self._throttle)
        return _ShutdownFirst(app, self.aclose)

    def start_queue(self) -> None:
        """Start listening to the rooms' message queue now (no-op without a queue).

        python-socketio would start it with the first socket; a replica must hear the
        room events of other replicas' turns from its first socket's first moment.
        """
        if self._shared_rooms and not self.sio.manager_initialized:
            self.sio.manager_initialized = True
            self.sio.manager.initialize()

    async def close_queue(self) -> None:
        """Stop the rooms' message-queue listener and close its Redis connections.

        python-socketio's ``shutdown`` leaves them open. Call it after the turns drained,
        so their last events still reach the sockets on other replicas.
        """
        if not self._shared_rooms:
            return
        manager = self.sio.manager
        listener: asyncio.Task[Any] | None = getattr(manager, "thread", None)
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        for resource in (getattr(manager, "pubsub", None), getattr(manager, "redis", None)):
            if resource is not None:
                try:
                    await resource.aclose()
                except Exception as exc:
                    logger.debug("socket.io queue close: %r", exc)
        manager.connected = False

    def on_session_idle(self, handler: SessionIdleHandler) -> None:
        """Call ``handler(session_id, user_did)`` when a session's last socket leaves.

        SRV-52's ``session.idle`` event: the runtime has no event bus for it yet, so
        this is the hook to subscribe with.
        """
        self._idle_handlers.append(handler)

    @property
    def connection_count(self) -> int:
        """Sockets connected to this replica."""
        return len(self._sockets)

    def sockets_of(self, session_id: str) -> int:
        """How many sockets are in the room of ``session_id``."""
        return self._rooms.count(session_id)

    def closing_after(
        self, shutdown_trigger: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[None]]:
        """A Hypercorn ``shutdown_trigger`` that closes every socket once ``shutdown_trigger``
        resolves, so open sockets do not hold the server for its whole graceful timeout
        (SRV-12 step 1)."""

        async def trigger() -> None:
            await shutdown_trigger()
            await self.aclose()

        return trigger

    async def aclose(self) -> None:
        """Fail waiting frontend calls, close every socket and stop background tasks.

        Idempotent: the serving shutdown and the ASGI lifespan both call it.
        """
        if self._closed:
            return
        self._closed = True
        self._pending.fail_all(SHUTTING_DOWN)
        try:
            # A client closes its connection once its last Socket.IO socket is
            # disconnected by the server, so Hypercorn need not wait out its grace.
            for sid in list(self._sockets):
                await self.sio.disconnect(sid)
            await self.sio.shutdown()
        except Exception:
            logger.exception("socket.io shutdown failed")

    # -- server → client ------------------------------------------------------------

    def broadcast(self, event: OracleEvent) -> None:
        """Deliver a plugin event to the sockets of its session (``ServerEventSink``).

        Never blocks: the emit runs as a task on the serving loop. With a message queue
        every event is published, since sockets of the session may be on other replicas.
        """
        if event.name in SESSION_EVENT_KINDS:
            # Every socket of the user hears of their sessions, bare: the client SDK
            # turns envelope events of the open session into chat messages.
            if event.user_did:
                room = user_room(event.user_did)
                self._spawn(self.sio.emit(event.name, dict(event.payload), room=room))
            return
        if not event.session_id:
            return
        if not self._shared_rooms and event.session_id not in self._rooms:
            return
        name, data = socket_message(event)
        self._spawn(self.sio.emit(name, data, room=event.session_id))

    async def call_browser_tool(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """Run a browser tool in one client of ``session_id`` and return its ``result``.

        Emits ``browser_tool_call {sessionId, requestId, toolCallId, toolName, args}`` to
        that client's socket and waits for its ``tool_result`` with the same
        ``toolCallId``: an id issued here for this call (``requestId`` repeats it).

        Args:
            session_id: The session whose client runs the tool.
            tool_name: The browser tool.
            args: Its arguments.
            request_id: The turn: its calls go to the socket its first call went to.
            socket_id: The socket the turn names, if it is connected to the session.
            timeout_ms: Defaults to ``FRONTEND_TOOL_TIMEOUT_MS``.

        Raises:
            FrontendCallError: the client answered with ``error`` (its text); no socket of
                the session is connected (``ws.no_client``, at once); the socket left
                before it answered (``ws.client_gone``); or no answer came in time
                (``Browser tool timeout after <ms>ms: <toolName>``, and that the outcome
                is unknown).
        """
        return await self._round_trip(
            "browser_tool",
            session_id,
            {"toolName": tool_name, "args": dict(args)},
            request_id=request_id,
            socket_id=socket_id,
            timeout_ms=timeout_ms,
        )

    async def call_action(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """Run an AG-UI action in one client of ``session_id`` and return its ``result``.

        Emits ``action_call {sessionId, requestId, toolCallId, toolName, args, status:
        "isRunning"}`` and waits for the matching ``action_call_result``; the socket and
        the id are chosen as for :meth:`call_browser_tool`.

        Raises:
            FrontendCallError: ``error`` or ``result.success === false`` (``result.error``,
                else the error text, else ``Action failed``); ``ws.no_client`` or
                ``ws.client_gone``; or no answer in time (``AG-UI action timeout after
                <ms>ms: <toolName>``, and that the outcome is unknown).
        """
        return await self._round_trip(
            "action",
            session_id,
            {"toolName": tool_name, "args": dict(args), "status": "isRunning"},
            request_id=request_id,
            socket_id=socket_id,
            timeout_ms=timeout_ms,
        )

    def for_session(self, user: UserInfo, session: SessionInfo) -> FrontendAccessor:
        """``rt_ctx.frontend`` for a turn of ``session`` (the server's ``FrontendService``).

        Calls go to the socket the turn names (``session.ws_id``), else the socket its
        earlier calls went to, else the session's newest socket.
        """
        return _SessionFrontend(self, session)

    async def _round_trip(
        self,
        kind: CallKind,
        session_id: str,
        fields: dict[str, Any],
        *,
        request_id: str | None,
        socket_id: str | None,
        timeout_ms: int | None,
    ) -> Any:
        tool_name = fields["toolName"]
        if self._closed:
            raise FrontendCallError(SHUTTING_DOWN, code="frontend.shutting_down")
        target = self._rooms.target(session_id, request_id=request_id, socket_id=socket_id)
        if target is None and not self._shared_rooms:
            raise FrontendCallError.no_client(kind, tool_name)
        limit = timeout_ms or self.settings.frontend_tool_timeout_ms
        call_id, future = self._pending.open(session_id, kind, target, request_id)
        payload = {"sessionId": session_id, "requestId": call_id, "toolCallId": call_id, **fields}
        event = "browser_tool_call" if kind == "browser_tool" else "action_call"
        try:
            if target is None:
                # The session's sockets may be on other replicas (SRV-54).
                await self.sio.emit(event, payload, room=session_id)
            else:
                await self.sio.emit(event, payload, to=target, ignore_queue=True)
            return await asyncio.wait_for(future, limit / 1000)
        except TimeoutError:
            raise FrontendCallError.timed_out(kind, tool_name, limit) from None
        finally:
            self._pending.close(call_id)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a sync tool handler running in a worker thread
            running = None
        if running is not None and (self._loop is None or running is self._loop):
            task = running.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
        elif self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(coro, self._loop)
        else:
            coro.close()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("socket emit failed: %r", task.exception())

    # -- handshake ------------------------------------------------------------------

    async def _admit(self, environ: Mapping[str, Any], auth: Any) -> BoundSocket | None:
        if self._closed:
            logger.debug("socket refused: the server is shutting down")
            return None
        session_id = _query_value(environ, "sessionId")
        if not session_id:
            logger.debug("socket refused: no sessionId in the handshake query")
            return None
        if self.authenticator is None:
            logger.error("socket refused: the gateway has no authenticator attached")
            return None
        try:
            auth_data = await self.authenticator.authenticate(handshake_headers(auth))
        except HTTPError as exc:
            logger.debug("socket refused for session %s: %s", session_id, exc)
            return None
        except Exception:
            logger.exception("socket refused for session %s: authentication failed", session_id)
            return None
        try:
            record = await self.sessions.get(auth_data.did, session_id)
        except Exception:
            logger.exception("socket refused for session %s: session lookup failed", session_id)
            return None
        if record is None:
            logger.debug("socket refused: session %s is not the caller's", session_id)
            return None
        claimed = _query_value(environ, "userDid")
        if claimed and claimed != auth_data.did:
            # `userDid` is informational (SRV-48); the UCAN decides who connects.
            logger.debug("socket for session %s claims another userDid", session_id)
        return BoundSocket(session_id, auth_data)

    async def _on_connect(self, sid: str, environ: Mapping[str, Any], auth: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        if self._throttle is not None:
            await self._throttle.check(environ)
        bound = await self._admit(environ, auth)
        if bound is None:
            raise socketio.exceptions.ConnectionRefusedError(REFUSED)
        self._sockets[sid] = bound
        self._rooms.add(bound.session_id, sid)
        await self.sio.enter_room(sid, bound.session_id)
        await self.sio.enter_room(sid, user_room(bound.did))
        connected = {
            "message": "Connected successfully",
            "sessionId": bound.session_id,
            "timestamp": timestamp(),
        }
        # python-socketio acknowledges the handshake after this handler returns; emitting
        # from a task sends `connected` after that acknowledgement, never before it.
        self._spawn(self.sio.emit("connected", connected, to=sid, ignore_queue=True))

    async def _on_disconnect(self, sid: str, reason: Any = None) -> None:
        bound = self._sockets.pop(sid, None)
        if bound is None:
            return
        self._pending.fail_socket(sid, FrontendCallError.client_gone().message)
        if not self._rooms.remove(sid):
            return
        logger.debug("session %s is idle: its last socket disconnected", bound.session_id)
        for handler in list(self._idle_handlers):
            try:
                result = handler(bound.session_id, bound.did)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("session idle handler failed")

    # -- client → server ------------------------------------------------------------

    async def _reply(self, sid: str, event: str, fields: Mapping[str, Any]) -> None:
        bound = self._sockets.get(sid)
        if bound is None:
            return
        # The socket is on this replica: no need to go through the message queue.
        await self.sio.emit(
            event,
            {**fields, "sessionId": bound.session_id, "timestamp": timestamp()},
            to=sid,
            ignore_queue=True,
        )

    async def _on_ping(self, sid: str, data: Any = None) -> None:
        await self._reply(sid, "pong", {})

    async def _on_status(self, sid: str, data: Any = None) -> None:
        await self._reply(
            sid,
            "status",
            {
                "connected": True,
                "activeSessions": len(self._rooms),
                "totalConnections": len(self._sockets),
            },
        )

    async def _on_subscribe(self, sid: str, data: Any = None) -> None:
        # The handshake already put the socket in its session's room; a socket never
        # joins another session's room.
        await self._reply(sid, "subscribed", {})

    async def _on_list_events(self, sid: str, data: Any = None) -> None:
        await self._reply(
            sid,
            "available-events",
            {"clientEvents": list(CLIENT_EVENTS), "serverEvents": list(SERVER_EVENTS)},
        )

    async def _on_tool_result(self, sid: str, data: Any = None) -> None:
        self._settle(sid, data, "browser_tool")

    async def _on_action_call_result(self, sid: str, data: Any = None) -> None:
        self._settle(sid, data, "action")

    def _settle(self, sid: str, data: Any, kind: CallKind) -> None:
        bound = self._sockets.get(sid)
        call_id = data.get("toolCallId") if isinstance(data, Mapping) else None
        if bound is None or not isinstance(call_id, str):
            return
        assert isinstance(data, Mapping)
        settled = self._pending.settle(
            call_id,
            session_id=bound.session_id,
            kind=kind,
            socket_id=sid,
            outcome=frontend_outcome(kind, data),
        )
        if settled:
            return
        if self.bus is not None:
            # The turn waiting for it may run on another replica (SRV-54).
            self._spawn(self.bus.publish_settle(kind, bound.session_id, call_id, data))
        else:
            logger.debug("dropped a %s result for call %s", kind, call_id)

    def _settle_forwarded(
        self, kind: str, session_id: str, call_id: str, data: Mapping[str, Any]
    ) -> bool:
        """Settle a call waiting here with a result that a socket on another replica got."""
        if kind not in ("browser_tool", "action"):
            return False
        return self._pending.settle(
            call_id,
            session_id=session_id,
            kind=cast(CallKind, kind),
            socket_id=None,
            outcome=frontend_outcome(cast(CallKind, kind), data),
        )


class _SessionFrontend:
    """One turn's frontend calls through the gateway (``FrontendAccessor``)."""

    def __init__(self, gateway: SocketGateway, session: SessionInfo) -> None:
        self._gateway = gateway
        self._session = session

    async def call(
        self,
        kind: FrontendCallKind,
        name: str,
        args: Mapping[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait for the client, passed on
    ) -> Any:
        gateway, session = self._gateway, self._session
        if kind == "browser_tool":
            run = gateway.call_browser_tool
        elif kind == "action":
            run = gateway.call_action
        else:
            raise ValueError(f"unknown frontend call kind {kind!r}")
        return await run(
            session.id,
            name,
            args,
            request_id=session.request_id,
            socket_id=session.ws_id,
            timeout_ms=None if timeout is None else max(1, round(timeout * 1000)),
        )


class _ShutdownFirst:
    """Pure ASGI wrapper: runs ``on_shutdown`` when the lifespan shuts down, then passes
    the shutdown on to the wrapped app (and every other message and scope unchanged)."""

    def __init__(self, app: ASGIApp, on_shutdown: Callable[[], Awaitable[None]]) -> None:
        self.app = app
        self.on_shutdown = on_shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def receive_with_shutdown() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.on_shutdown()
            return message

        await self.app(scope, receive_with_shutdown, send)
