"""oracle-server: the oracle's HTTP server.

``create_oracle_app(config, ...)`` boots the core runtime and returns an ``OracleApp``
whose ``listen()`` serves it with Hypercorn: UCAN authentication, sessions, messages as
JSON or SSE, abort, delegations, rate limits and persistence.

Everything public is exported here and from ``oracle_server.testing``; every other
module is private (its name, or a folder on its path, starts with ``_``) and may move.
"""

from oracle_server._app import OracleApp, freeze_boot_objects
from oracle_server._auth.authenticator import AuthData, Authenticator, DelegationInfo
from oracle_server._auth.ucan_service import IxoUcanService
from oracle_server._boot import create_oracle_app
from oracle_server._errors import HTTPError
from oracle_server._loop import event_loop_factory, run
from oracle_server._settings import ServerSettings, load_settings

__all__ = [
    "AuthData",
    "Authenticator",
    "DelegationInfo",
    "HTTPError",
    "IxoUcanService",
    "OracleApp",
    "ServerSettings",
    "create_oracle_app",
    "event_loop_factory",
    "freeze_boot_objects",
    "load_settings",
    "run",
]
