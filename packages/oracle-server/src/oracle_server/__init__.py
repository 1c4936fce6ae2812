"""oracle-server: the oracle's HTTP server.

``create_oracle_app(config, ...)`` boots the core runtime and returns an ``OracleApp``
whose ``listen()`` serves it with Hypercorn: UCAN authentication, sessions, messages as
JSON or SSE, abort, delegations, rate limits and persistence.
"""

from oracle_server.auth import AuthData, Authenticator, DelegationInfo
from oracle_server.bootstrap import OracleApp, create_oracle_app
from oracle_server.errors import HTTPError
from oracle_server.settings import ServerSettings, load_settings

__all__ = [
    "AuthData",
    "Authenticator",
    "DelegationInfo",
    "HTTPError",
    "OracleApp",
    "ServerSettings",
    "create_oracle_app",
    "load_settings",
]
