"""oracle-server: the oracle's HTTP server.

``create_oracle_app(config, ...)`` boots the core runtime and returns an ``OracleApp``
whose ``listen()`` serves it with Hypercorn: UCAN authentication, sessions, messages as
JSON or SSE, abort, delegations, rate limits and persistence.

Everything public is exported here and from ``oracle_server.testing``; every other
module is private (its name, or a folder on its path, starts with ``_``) and may move.
"""

from typing import TYPE_CHECKING

from oracle_server._lazy import lazy_attributes

if TYPE_CHECKING:
    from oracle_server._app import OracleApp, freeze_boot_objects
    from oracle_server._auth.authenticator import AuthData, Authenticator, DelegationInfo
    from oracle_server._auth.ucan_service import IxoUcanService
    from oracle_server._boot import create_oracle_app
    from oracle_server._errors import HTTPError
    from oracle_server._loop import event_loop_factory, run
    from oracle_server._settings import ServerSettings, load_settings

# Loaded on first use, so that a process needing one private module (the supervisor of
# ``oracle serve --workers``) does not load the whole server with the package.
_EXPORTS = {
    "AuthData": "oracle_server._auth.authenticator",
    "Authenticator": "oracle_server._auth.authenticator",
    "DelegationInfo": "oracle_server._auth.authenticator",
    "HTTPError": "oracle_server._errors",
    "IxoUcanService": "oracle_server._auth.ucan_service",
    "OracleApp": "oracle_server._app",
    "ServerSettings": "oracle_server._settings",
    "create_oracle_app": "oracle_server._boot",
    "event_loop_factory": "oracle_server._loop",
    "freeze_boot_objects": "oracle_server._app",
    "load_settings": "oracle_server._settings",
    "run": "oracle_server._loop",
}


__getattr__ = lazy_attributes(globals(), __name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
