"""``route_context``: what a plugin route handler gets, over a real Starlette app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_core import (
    ROUTE_RUNTIME_APP_STATE,
    ROUTE_USER_SCOPE_STATE,
    OraclePlugin,
    PluginContext,
    RouteContextError,
    RuntimeContext,
    SessionInfo,
    UserInfo,
    route_context,
)
from oracle_core.testing import TestRuntime, create_test_runtime

ALICE = "did:key:z6MkAliceOfTheRouteContextTests"
BOB = "did:key:z6MkBobOfTheRouteContextTests"


class GreeterConfig(BaseModel):
    GREETER_GREETING: str = "Hello"


def describe(ctx: RuntimeContext[Any]) -> dict[str, Any]:
    assert ctx.plugin_config is None or isinstance(ctx.plugin_config, GreeterConfig)
    return {
        "did": ctx.user.did,
        "plugin": ctx.plugin_name,
        "logger": ctx.logger.name,
        "greeting": ctx.plugin_config.GREETER_GREETING if ctx.plugin_config else None,
        "session": ctx.session.id,
        "request_id": ctx.session.request_id,
        "loaded": sorted(ctx.loaded_plugins),
        "history": len(ctx.history.messages),
    }


async def whoami(request: Request) -> Response:
    """Protected: the caller, through the context the runtime gives a route."""
    try:
        ctx = route_context(request)
    except RouteContextError as exc:
        if exc.code != "route.unauthenticated":
            raise
        return JSONResponse({"error": exc.code}, status_code=401)
    assert ctx.matrix is not None
    return JSONResponse({**describe(ctx), "room": await ctx.matrix.user_room_id()})


async def public(request: Request) -> Response:
    """Public: works without a user."""
    return JSONResponse(describe(route_context(request, authenticated=False)))


class GreeterPlugin(OraclePlugin):
    name = "greeter"
    version = "1.0.0"
    manifest = {"title": "Greeter", "summary": "Greets.", "when_to_use": ["greetings"]}
    config_schema = GreeterConfig

    def get_routes(self, ctx: PluginContext[Any]) -> list[BaseRoute]:
        return [Route("/whoami", whoami), Route("/public/{item}", public)]


class FakeAuthentication:
    """Stands in for the server's authentication: ``x-user`` names the caller."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state = scope.setdefault("state", {})
            state["request_id"] = "req-1"
            for name, value in scope["headers"]:
                if name == b"x-user":
                    state[ROUTE_USER_SCOPE_STATE] = UserInfo(did=value.decode())
        await self.app(scope, receive, send)


@pytest.fixture
async def runtime() -> AsyncIterator[TestRuntime]:
    async with await create_test_runtime(
        plugins=[GreeterPlugin()], config={"GREETER_GREETING": "Olá"}
    ) as rt:
        rt.matrix.user_rooms[ALICE] = "!alice:localhost"
        yield rt


def serve(runtime: TestRuntime | None) -> httpx.AsyncClient:
    routes = [route for _, route in runtime.runtime.routes] if runtime else []
    app = Starlette(routes=routes or [Route("/whoami", whoami)])
    if runtime is not None:
        setattr(app.state, ROUTE_RUNTIME_APP_STATE, runtime.runtime)
    transport = httpx.ASGITransport(app=FakeAuthentication(app))
    return httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_a_route_gets_the_callers_context_scoped_to_its_plugin(
    runtime: TestRuntime,
) -> None:
    async with serve(runtime) as http:
        alice = (await http.get("/whoami", headers={"x-user": ALICE})).json()
        bob = (await http.get("/whoami", headers={"x-user": BOB})).json()
    assert alice == {
        "did": ALICE,
        "plugin": "greeter",
        "logger": "oracle.test.plugin.greeter",
        "greeting": "Olá",
        "session": "",
        "request_id": "req-1",
        "loaded": [],
        "history": 0,
        # The Matrix accessor is the caller's own.
        "room": "!alice:localhost",
    }
    assert bob["did"] == BOB
    assert bob["room"] is None


async def test_without_a_user_the_route_is_told_to_answer_401(runtime: TestRuntime) -> None:
    async with serve(runtime) as http:
        refused = await http.get("/whoami")
        anonymous = await http.get("/public/x")
    assert refused.status_code == 401
    assert refused.json() == {"error": "route.unauthenticated"}
    assert anonymous.json()["did"] == ""
    assert anonymous.json()["plugin"] == "greeter"


async def test_an_app_without_a_runtime_is_a_deployment_error() -> None:
    async with serve(None) as http:
        with pytest.raises(RouteContextError) as info:
            await http.get("/whoami", headers={"x-user": ALICE})
    assert info.value.code == "route.no_runtime"
    assert info.value.hint is not None
    assert ROUTE_RUNTIME_APP_STATE in info.value.hint


async def test_request_context_outside_a_route(runtime: TestRuntime) -> None:
    rt = runtime.runtime
    plain = rt.request_context(UserInfo(did=ALICE))
    assert plain.plugin_name == ""
    assert plain.user.did == ALICE
    assert plain.session == SessionInfo(id="")
    scoped = rt.request_context(
        UserInfo(did=ALICE), plugin="greeter", session=SessionInfo(id="thread-9")
    )
    assert scoped.plugin_name == "greeter"
    assert isinstance(scoped.plugin_config, GreeterConfig)
    assert scoped.session.id == "thread-9"
    assert scoped.secrets is not None
    assert scoped.blob_store is not None
    blob = await scoped.blob_store.put(user_did=ALICE, name="n", value="v")
    assert (await scoped.blob_store.get(user_did=ALICE, blob_id=blob)) is not None
    await runtime.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        rt.request_context(UserInfo(did=ALICE))
