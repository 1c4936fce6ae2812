"""What a route declares about its requests, and how the pipeline finds a request's route.

A route built as :class:`LimitedRoute` carries :class:`RouteLimits`: the largest body it
reads and the throttle class it counts in (turns or reads, SRV-46). Any other route (a
plugin's, a host's) has the defaults: the server's ``MAX_BODY_BYTES`` and the reads class.
The body limit and the protection stages look the route up once per request through
:class:`RouteTable`, which answers as Starlette's router will route the request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

__all__ = ["DEFAULT_LIMITS", "LimitedRoute", "RouteLimits", "RouteTable", "ThrottleClass"]

ThrottleClass = Literal["turns", "reads"]
"""``turns``: requests that run the model (``POST /messages/{id}``); ``reads``: the rest."""


@dataclass(frozen=True)
class RouteLimits:
    """A route's limits.

    Attributes:
        max_body_bytes: The largest request body the route reads; ``None`` takes the
            server's ``MAX_BODY_BYTES``. Longer bodies answer 413 before the handler runs.
        throttle: The throttle class whose budget the route's requests spend.
    """

    max_body_bytes: int | None = None
    throttle: ThrottleClass = "reads"


DEFAULT_LIMITS = RouteLimits()


class LimitedRoute(Route):
    """A Starlette ``Route`` that declares its :class:`RouteLimits`."""

    def __init__(
        self, path: str, endpoint: Callable[..., Any], *, limits: RouteLimits, **kwargs: Any
    ) -> None:
        super().__init__(path, endpoint, **kwargs)
        self.limits = limits


_STATE_KEY = "route_limits"


class RouteTable:
    """Finds the route that will serve a request, and its limits.

    Args:
        routes: The app's routes, read when a request arrives (plugins and the API docs add
            theirs after the pipeline is wired); ``None`` treats every path as routed with
            the default limits.
    """

    def __init__(self, routes: Callable[[], Sequence[BaseRoute]] | None = None) -> None:
        self._routes = routes

    def limits(self, scope: Scope) -> RouteLimits | None:
        """The limits of the route serving ``scope``; ``None`` when no route answers its
        path with any method (the router's JSON 404 answers it). Cached in the scope."""
        state = scope.setdefault("state", {})
        if _STATE_KEY not in state:
            state[_STATE_KEY] = self._resolve(scope)
        found: RouteLimits | None = state[_STATE_KEY]
        return found

    def _resolve(self, scope: Scope) -> RouteLimits | None:
        if self._routes is None:
            return DEFAULT_LIMITS
        partial: BaseRoute | None = None
        for route in self._routes():
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return _limits_of(route)
            if match == Match.PARTIAL and partial is None:
                partial = route
        return None if partial is None else _limits_of(partial)


def _limits_of(route: BaseRoute) -> RouteLimits:
    return route.limits if isinstance(route, LimitedRoute) else DEFAULT_LIMITS
