"""HTTP routes of the oracle (SRV-17 … 38)."""

from oracle_server._http.routes.approvals import approval_routes
from oracle_server._http.routes.attachments import attachment_routes
from oracle_server._http.routes.delegation import delegation_routes
from oracle_server._http.routes.history import history_routes
from oracle_server._http.routes.messages import message_routes
from oracle_server._http.routes.secrets import secret_routes
from oracle_server._http.routes.sessions import session_routes
from oracle_server._http.routes.system import system_routes

__all__ = [
    "approval_routes",
    "attachment_routes",
    "delegation_routes",
    "history_routes",
    "message_routes",
    "secret_routes",
    "session_routes",
    "system_routes",
]
