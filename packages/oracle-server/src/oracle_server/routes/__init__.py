"""HTTP routes of the oracle (SRV-17 … 38)."""

from oracle_server.routes.delegation import delegation_routes
from oracle_server.routes.history import history_routes
from oracle_server.routes.messages import message_routes
from oracle_server.routes.sessions import session_routes
from oracle_server.routes.system import system_routes

__all__ = [
    "delegation_routes",
    "history_routes",
    "message_routes",
    "session_routes",
    "system_routes",
]
