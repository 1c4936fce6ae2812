"""Fixtures of the client SDK tests: the published SDK in Node, and what stands around it.

- `node`: the ``node`` executable once ``js/node_modules`` holds exactly what
  ``js/package-lock.json`` pins (``npm ci`` on first use, or when the lock changed). The
  lock pins ``@ixo/oracles-client-sdk`` 1.4.0 and maps six packages that the registry
  here cannot install to ``js/placeholders`` (see ``js/package.json``). Node 20+ and npm
  are required: without them these tests fail, they never skip.
- `run_driver`: runs ``js/drive_sdk.mjs`` (the SDK's hooks under react-test-renderer) and
  returns the JSON records it printed.
- `CuttingProxy`: a TCP proxy between the SDK and the oracle that logs every HTTP request
  and cuts the connection of one streamed turn mid-way, as a dropped network would,
  while the oracle keeps running the turn.
- `EntityRegistry`: Blocksync's GraphQL endpoint answering the one query the SDK sends at
  mount (``GetEntityById``), with the oracle's service URLs.
- `drive_sdk`: all of the above around one served app: ``await drive_sdk(app, user,
  prompts=[...])`` runs the scenario through the proxy and returns an `SdkRun`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from oracle_server.testing import LoopbackServer
from oracle_ucan.testing import NodeSetupError, node_with_locked_packages

JS_DIR = Path(__file__).parent / "js"
DRIVER = JS_DIR / "drive_sdk.mjs"
DRIVER_TIMEOUT = 60.0
"""Seconds the whole driver run may take."""


# -- Node ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, after ``npm ci`` when the install is missing or stale."""
    try:
        return node_with_locked_packages(JS_DIR, code="sdk", purpose="the client SDK tests")
    except NodeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass
class DriverRun:
    """What ``drive_sdk.mjs`` printed, and how it ended."""

    records: list[dict[str, Any]]
    stderr: str
    returncode: int

    def steps(self, name: str) -> list[dict[str, Any]]:
        """The records of one step, in order."""
        return [record for record in self.records if record["step"] == name]

    def step(self, name: str, **match: Any) -> dict[str, Any]:
        """The one record of ``name`` whose fields equal ``match``."""
        found = [r for r in self.steps(name) if all(r.get(k) == v for k, v in match.items())]
        assert len(found) == 1, (name, match, self.steps(name))
        return found[0]


RunDriver = Callable[[Mapping[str, Any]], Awaitable[DriverRun]]


@pytest.fixture(scope="session")
def run_driver(node: str) -> RunDriver:
    """``await run_driver(config)``: run the scenario of ``drive_sdk.mjs`` to its end."""

    async def run(config: Mapping[str, Any]) -> DriverRun:
        process = await asyncio.create_subprocess_exec(
            node,
            str(DRIVER),
            cwd=JS_DIR,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        config_line = json.dumps(dict(config)).encode() + b"\n"
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(config_line), DRIVER_TIMEOUT
            )
        except TimeoutError:
            process.kill()
            stdout, stderr = await process.communicate()
        records = [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]
        assert process.returncode is not None
        return DriverRun(records, stderr.decode(), process.returncode)

    return run


# -- the proxy ---------------------------------------------------------------------------

_HEAD_END = b"\r\n\r\n"
_COMPLETE_FRAME = re.compile(rb"event: (\S+)\nid: (\d+)\ndata: [^\n]*\n\n")


@dataclass
class ProxiedRequest:
    """One HTTP request through the proxy, and the response bytes it got back."""

    connection: int
    method: str
    target: str
    headers: dict[str, str]
    response: bytearray = field(default_factory=bytearray)
    cut: bool = False

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.split("?", 1)[0]

    def frames(self) -> list[tuple[str, int]]:
        """``(event, id)`` of the SSE frames that reached the client whole."""
        return [
            (event.decode(), int(number))
            for event, number in _COMPLETE_FRAME.findall(bytes(self.response))
        ]


class _RequestReader:
    """Splits a connection's client bytes into request heads (bodies have Content-Length:
    the SDK's ``fetch`` sends string bodies, never chunked ones)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._body_left = 0

    def feed(self, data: bytes) -> list[tuple[str, str, dict[str, str]]]:
        self._buffer += data
        heads: list[tuple[str, str, dict[str, str]]] = []
        while True:
            if self._body_left:
                skipped = min(self._body_left, len(self._buffer))
                del self._buffer[:skipped]
                self._body_left -= skipped
                if self._body_left:
                    return heads
            end = self._buffer.find(_HEAD_END)
            if end < 0:
                return heads
            lines = self._buffer[:end].decode("latin-1").split("\r\n")
            del self._buffer[: end + len(_HEAD_END)]
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self._body_left = int(headers.get("content-length", "0"))
            heads.append((method, target, headers))


class CuttingProxy:
    """A loopback TCP proxy to ``upstream_port`` that logs every request and cuts once.

    The first response to ``POST /messages/…`` is cut (both sides closed, as a dropped
    network would) as soon as ``cut_after`` ``message`` frames have been forwarded.
    New connections are proxied as before, so the client's rejoin goes through.

    Attributes:
        requests: Every request, in the order the proxy read it.
    """

    def __init__(self, upstream_port: int, *, cut_after: int) -> None:
        self.upstream_port = upstream_port
        self.cut_after = cut_after
        self.requests: list[ProxiedRequest] = []
        self._server: asyncio.Server | None = None
        self._connections = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:{port}``."""
        assert self._server is not None, "the proxy is not started"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    @property
    def cut_request(self) -> ProxiedRequest | None:
        """The request whose response was cut, once it was."""
        return next((r for r in self.requests if r.cut), None)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections += 1
        number = self._connections
        current: list[ProxiedRequest] = []
        upstream_in, upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def requests() -> None:
            reader = _RequestReader()
            while data := await client_in.read(65536):
                for method, target, headers in reader.feed(data):
                    request = ProxiedRequest(number, method, target, headers)
                    self.requests.append(request)
                    current[:] = [request]
                upstream.write(data)
                await upstream.drain()

        async def responses() -> None:
            while data := await upstream_in.read(65536):
                client.write(data)
                await client.drain()
                if not current:
                    continue
                request = current[0]
                request.response += data
                if self._should_cut(request):
                    request.cut = True
                    return

        try:
            pumps = [asyncio.create_task(requests()), asyncio.create_task(responses())]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            for writer in (client, upstream):
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            self._tasks.discard(task)

    def _should_cut(self, request: ProxiedRequest) -> bool:
        if self.cut_request is not None:
            return False
        if request.method != "POST" or not request.path.startswith("/messages/"):
            return False
        messages = sum(event == "message" for event, _ in request.frames())
        return messages >= self.cut_after


# -- the entity registry ------------------------------------------------------------------


class EntityRegistry(LoopbackServer):
    """Blocksync's ``POST /graphql`` answering ``GetEntityById`` for one oracle entity.

    Attributes:
        queries: ``(operationName, variables)`` of every request.
    """

    name = "EntityRegistry"

    def __init__(self, entity_id: str, *, api_url: str, ws_url: str) -> None:
        self.entity_id = entity_id
        self.api_url = api_url
        self.ws_url = ws_url
        self.queries: list[tuple[str, dict[str, Any]]] = []
        super().__init__([Route("/graphql", self._graphql, methods=["POST"])])

    @property
    def graphql_url(self) -> str:
        """``BLOCKSYNC_GRAPHQL_URL`` for the client."""
        return f"{self.origin}/graphql"

    async def _graphql(self, request: Request) -> Response:
        body = await request.json()
        operation, variables = body.get("operationName"), body.get("variables") or {}
        self.queries.append((str(operation), dict(variables)))
        if operation != "GetEntityById" or variables.get("id") != self.entity_id:
            return JSONResponse({"data": {"entity": None}})
        services = [
            {"id": "{id}#api", "type": "oracleService", "serviceEndpoint": self.api_url},
            {"id": "{id}#ws", "type": "wsService", "serviceEndpoint": self.ws_url},
        ]
        entity = {
            "id": self.entity_id,
            "type": "oracle",
            "status": 0,
            "metadata": None,
            "owner": None,
            "startDate": None,
            "endDate": None,
            "entityVerified": False,
            "accounts": [],
            "service": services,
            "linkedResource": [],
            "settings": {},
        }
        return JSONResponse({"data": {"entity": entity}})


@dataclass
class SdkRun:
    """What ``drive_sdk`` gives back: the driver's records, the proxied requests (and the
    one cut), the registry's queries, the delegation handed over, and what
    ``while_serving`` returned."""

    driver: DriverRun
    requests: list[ProxiedRequest]
    cut: ProxiedRequest | None
    entity_queries: list[tuple[str, dict[str, Any]]]
    delegation: str
    served: Any = None


DriveSdk = Callable[..., Awaitable[SdkRun]]


@pytest.fixture(scope="module")
def drive_sdk(run_driver: RunDriver) -> DriveSdk:
    """``await drive_sdk(app, user, prompts=[...], **config)``: serve ``app`` behind the
    proxy (``cut_after`` message frames, never by default) and the entity registry, give
    the SDK a delegation of ``user`` to the oracle, run ``drive_sdk.mjs`` to its end and
    fail the test, with its last records and stderr, when the driver failed.

    ``config`` adds to the driver's (``browserTools``…). ``while_serving`` runs once the
    driver ended, with the driver's run, while the app still serves (its stores are closed
    afterwards).
    """
    from oracle_server.testing import serving
    from oracle_ucan import delegate

    async def drive(
        app: Any,
        user: Any,
        *,
        prompts: list[str],
        cut_after: int = 10**9,
        history_page_size: int = 10,
        while_serving: Callable[[DriverRun], Awaitable[Any]] | None = None,
        **config: Any,
    ) -> SdkRun:
        oracle_did = app.state.oracle_did
        expires = int(time.time()) + 3600
        token = delegate(
            user,
            audience=oracle_did,
            capabilities=[{"with": user.did(), "can": "*"}],
            expiration=expires,
        ).to_base64()
        async with serving(app) as base_url:
            port = int(base_url.rsplit(":", 1)[1])
            async with (
                CuttingProxy(port, cut_after=cut_after) as proxy,
                EntityRegistry(oracle_did, api_url=proxy.base_url, ws_url=base_url) as registry,
            ):
                driver = await run_driver(
                    {
                        "oracleDid": oracle_did,
                        "baseUrl": proxy.base_url,
                        "wsUrl": base_url,
                        "graphqlUrl": registry.graphql_url,
                        "userDid": user.did(),
                        "delegation": token,
                        "delegationExpiresAt": expires * 1000,
                        "prompts": prompts,
                        "historyPageSize": history_page_size,
                        "timeoutMs": 15_000,
                        **config,
                    }
                )
            served = None
            if driver.returncode == 0 and while_serving is not None:
                served = await while_serving(driver)
        if driver.returncode != 0:
            pytest.fail(
                f"sdk.driver_failed: drive_sdk.mjs exited {driver.returncode}; last "
                f"records {driver.records[-3:]}\nstderr:\n{driver.stderr[-3000:]}",
                pytrace=False,
            )
        return SdkRun(
            driver,
            list(proxy.requests),
            proxy.cut_request,
            list(registry.queries),
            token,
            served,
        )

    return drive
