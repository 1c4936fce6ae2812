"""A real Matrix homeserver (Synapse, from PyPI) on loopback, for tests of the Matrix layer.

Synapse runs in a virtualenv of its own (``_synapse_venv.py``). Each `Synapse` is one
homeserver process with its own data directory (SQLite database, media, log), listening
for clients only on ``127.0.0.1``: no federation, open registration, rate limits out of
the way.

Example:
    ```python
    with Synapse() as server:
        alice = server.register("alice", "alice-password")
        client = nio.AsyncClient(server.base_url, alice.user_id)
        ...
    ```

Processes are stopped by ``__exit__``, by `Synapse.close`, and at interpreter exit; on
Linux a homeserver started from the main thread also receives SIGTERM if its parent dies.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from oracle_core.testing import mark_sensitive
from oracle_server.testing._server import free_port
from oracle_server.testing._synapse_venv import (
    SERVER_NAME,
    SynapseError,
    config_template,
    ensure_synapse_venv,
)

__all__ = ["RegisteredUser", "Synapse"]

_UNLIMITED = {"per_second": 1000, "burst_count": 1000}
# Every client-facing rate limiter that Synapse 1.163 reads (synapse/config/ratelimiting.py).
# Synapse ignores keys it does not know, so names from other releases would be harmless;
# these all exist in the pinned one.
_RATE_LIMITS: dict[str, Any] = {
    "rc_message": _UNLIMITED,
    "rc_registration": _UNLIMITED,
    "rc_registration_token_validity": _UNLIMITED,
    "rc_login": {
        "address": _UNLIMITED,
        "account": _UNLIMITED,
        "failed_attempts": _UNLIMITED,
    },
    "rc_admin_redaction": _UNLIMITED,
    "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
    "rc_joins_per_room": _UNLIMITED,
    "rc_key_requests": _UNLIMITED,
    "rc_3pid_validation": _UNLIMITED,
    "rc_invites": {
        "per_room": _UNLIMITED,
        "per_user": _UNLIMITED,
        "per_issuer": _UNLIMITED,
    },
    "rc_third_party_invite": _UNLIMITED,
    "rc_media_create": _UNLIMITED,
    "rc_presence": {"per_user": _UNLIMITED},
    "rc_delayed_event_mgmt": _UNLIMITED,
    "rc_room_creation": _UNLIMITED,
    "rc_reports": _UNLIMITED,
    "rc_user_directory": _UNLIMITED,
    "rc_profile": _UNLIMITED,
}

# Synapse's own format, logged to stderr, which goes to the instance's log file: that way
# start-up tracebacks printed before logging is set up land in the same file.
_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "formatters": {
        "precise": {
            "format": "%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - "
            "%(request)s - %(message)s"
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "precise",
            "stream": "ext://sys.stderr",
        }
    },
    # DEBUG here would log access tokens.
    "loggers": {"synapse.storage.SQL": {"level": "INFO"}},
    "root": {"level": "INFO", "handlers": ["console"]},
    "disable_existing_loggers": False,
}


@dataclass(frozen=True)
class RegisteredUser:
    """A user created by `Synapse.register`, with a logged-in device.

    Attributes:
        user_id: The full Matrix ID, ``@localpart:localhost``.
        access_token: The access token of ``device_id``.
        device_id: The device created by the registration.
        password: The password, for clients that log in themselves.
    """

    user_id: str
    access_token: str
    device_id: str
    password: str


# -- one homeserver ----------------------------------------------------------------------


class Synapse:
    """One Synapse process serving ``localhost`` on ``http://127.0.0.1:<port>``.

    The data directory keeps the database, media and ``homeserver.log`` across `stop`,
    `kill` and `restart`; the port stays the same, so clients reconnect to `base_url`.
    ``with Synapse() as server:`` starts it and, at the end, stops it and removes a data
    directory that it created.

    Args:
        python: The Synapse virtualenv's python. Default: `ensure_synapse_venv()`.
        data_dir: Where the homeserver keeps its files. Default: a new temporary
            directory, removed by `close`. A given directory is never removed.
        port: The client port. Default: a free one.
        extra_config: Top-level keys written over the test configuration.
        start_timeout: Seconds `start` waits for ``GET /health``.
    """

    server_name: str = SERVER_NAME

    def __init__(
        self,
        python: Path | None = None,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
        extra_config: Mapping[str, Any] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self._python = python
        self._owns_data_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="oracle-synapse-")) if data_dir is None else data_dir
        ).absolute()
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._extra_config = dict(extra_config or {})
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._shared_secret: str | None = None
        _unclosed.add(self)

    # -- files

    @property
    def config_path(self) -> Path:
        """The ``homeserver.yaml`` this instance runs with (JSON, which is YAML)."""
        return self.data_dir / "homeserver.yaml"

    @property
    def log_path(self) -> Path:
        """The homeserver's log: Synapse's logging and anything the process printed."""
        return self.data_dir / "homeserver.log"

    @property
    def database_path(self) -> Path:
        """The homeserver's SQLite database.

        Synapse runs SQLite in WAL mode: recent writes sit in ``<database>-wal`` until a
        checkpoint. To look for a string in everything stored, use `stored_bytes`.
        """
        return self.data_dir / "homeserver.db"

    @property
    def media_store_path(self) -> Path:
        """Where the homeserver keeps uploaded media, one file per upload."""
        return self.data_dir / "media_store"

    def stored_bytes(self) -> bytes:
        """The raw bytes of the database and its WAL and journal files, concatenated.

        Uploaded media are not included: they are files under `media_store_path`.
        """
        chunks = []
        for suffix in ("", "-wal", "-journal"):
            path = self.database_path.with_name(self.database_path.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                chunks.append(path.read_bytes())
        return b"".join(chunks)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of `log_path` (empty if there is no log yet)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- the process

    @property
    def running(self) -> bool:
        """Whether the homeserver process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id while running, else None."""
        return self._process.pid if self.running and self._process else None

    def start(self) -> None:
        """Start the homeserver and wait until ``GET /health`` answers ``OK``.

        The configuration is (re)written from the template at each start, so a new
        instance on an old ``data_dir`` serves its data on the new port.

        Raises:
            SynapseError: it is already running, or it exited or did not become healthy
                within ``start_timeout`` (the message shows the log tail).
        """
        if self.running:
            raise SynapseError(
                "synapse.already_running",
                f"the homeserver on {self.base_url} is running; stop() or restart() it",
            )
        if self._python is None:
            self._python = ensure_synapse_venv()
        self._write_config(self._python)
        self._shared_secret = str(
            json.loads(self.config_path.read_text())["registration_shared_secret"]
        )
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
        }
        with self.log_path.open("ab") as log:
            log.write(f"---- oracle: starting on {self.base_url}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [str(self._python), "-m", "synapse.app.homeserver", "-c", str(self.config_path)],
                cwd=self.data_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_parent_death_signal(),  # noqa: PLW1509 - only a prctl call
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the homeserver with SIGTERM (SIGKILL after ``timeout`` seconds) and reap it."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self) -> None:
        """Kill the homeserver with SIGKILL, as a crash would, and reap it."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop the homeserver if it runs, then start it on the same port and data."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the homeserver and remove the data directory if this instance created it."""
        self.stop()
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        _unclosed.discard(self)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()  # the error carries the log tail
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<Synapse {self.base_url} {state} data_dir={str(self.data_dir)!r}>"

    # -- users

    def register(self, localpart: str, password: str, admin: bool = False) -> RegisteredUser:
        """Create a user with the shared-secret admin API (``/_synapse/admin/v1/register``).

        Args:
            localpart: The user's localpart (``alice`` for ``@alice:localhost``).
            password: Its password.
            admin: Whether the user is a server admin.

        Returns:
            The user, logged in on a new device.

        Raises:
            SynapseError: the homeserver is not running, or refused the registration
                (``errcode`` ``M_USER_IN_USE`` when the user exists).
        """
        if not self.running or self._shared_secret is None:
            raise SynapseError(
                "synapse.not_running", f"start() the homeserver before registering {localpart!r}"
            )
        mac = hmac.new(self._shared_secret.encode(), digestmod=hashlib.sha1)
        with httpx.Client(base_url=self.base_url, timeout=30.0) as http:
            response = http.get("/_synapse/admin/v1/register")
            nonce = _json_object(response).get("nonce")
            if response.status_code == 200 and isinstance(nonce, str):
                for part in (nonce, localpart, password):
                    mac.update(part.encode())
                    mac.update(b"\x00")
                mac.update(b"admin" if admin else b"notadmin")
                response = http.post(
                    "/_synapse/admin/v1/register",
                    json={
                        "nonce": nonce,
                        "username": localpart,
                        "password": password,
                        "admin": admin,
                        "mac": mac.hexdigest(),
                    },
                )
        body = _json_object(response)
        if response.status_code != 200:
            errcode = body.get("errcode")
            hint = (
                "pick a localpart no other test uses (e.g. with a uuid suffix)"
                if errcode == "M_USER_IN_USE"
                else "see the homeserver log"
            )
            raise SynapseError(
                "synapse.register_rejected",
                f"Synapse refused to register {localpart!r}: HTTP {response.status_code} "
                f"{errcode} {body.get('error', response.text)!r}; {hint}",
                errcode=errcode if isinstance(errcode, str) else None,
            )
        mark_sensitive(str(body["access_token"]), password)
        return RegisteredUser(
            user_id=str(body["user_id"]),
            access_token=str(body["access_token"]),
            device_id=str(body["device_id"]),
            password=password,
        )

    # -- internals

    def _write_config(self, python: Path) -> None:
        template = config_template(python)
        config: dict[str, Any] = json.loads((template / "homeserver.json").read_text())
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The signing key of the template serves every test homeserver: none federates.
        signing_key = self.data_dir / f"{SERVER_NAME}.signing.key"
        shutil.copyfile(template / f"{SERVER_NAME}.signing.key", signing_key)
        log_config = self.data_dir / "log.config"
        log_config.write_text(json.dumps(_LOG_CONFIG, indent=1))
        config.update(
            {
                "server_name": SERVER_NAME,
                "pid_file": str(self.data_dir / "homeserver.pid"),
                "listeners": [
                    {
                        "port": self.port,
                        "bind_addresses": ["127.0.0.1"],
                        "type": "http",
                        "tls": False,
                        "x_forwarded": False,
                        "resources": [{"names": ["client"], "compress": False}],
                    }
                ],
                "database": {"name": "sqlite3", "args": {"database": str(self.database_path)}},
                "media_store_path": str(self.media_store_path),
                "log_config": str(log_config),
                "signing_key_path": str(signing_key),
                "trusted_key_servers": [],
                "suppress_key_server_warning": True,
                "federation_domain_whitelist": [],
                "enable_registration": True,
                "enable_registration_without_verification": True,
                "report_stats": False,
                "max_upload_size": "100M",
                # bcrypt's default 12 rounds cost ~0.25 s per registration and login.
                "bcrypt_rounds": 4,
                **_RATE_LIMITS,
            }
        )
        config.update(self._extra_config)
        self.config_path.write_text(json.dumps(config, indent=1))

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                process = self._process
                if process is None or process.poll() is not None:
                    code = None if process is None else process.returncode
                    raise SynapseError(
                        "synapse.start_failed",
                        f"the homeserver exited with {code} before it was healthy; "
                        f"log {self.log_path}:\n{self.log_tail()}",
                    )
                with contextlib.suppress(httpx.TransportError):
                    response = http.get(f"{self.base_url}/health")
                    if response.status_code == 200 and response.text == "OK":
                        return
                if time.monotonic() > deadline:
                    raise SynapseError(
                        "synapse.start_timeout",
                        f"GET {self.base_url}/health was not OK within "
                        f"{self._start_timeout:.0f} s; log {self.log_path}:\n{self.log_tail()}",
                    )
                time.sleep(0.05)


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# -- no process outlives the tests ------------------------------------------------------

_unclosed: set[Synapse] = set()
"""Homeservers not closed yet; `_close_all` closes them at interpreter exit."""


@atexit.register
def _close_all() -> None:
    for server in list(_unclosed):
        server.close()


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent dies.

    Linux sends it when the *thread* that forked exits, so only the main thread uses it:
    a worker thread may end long before the tests do.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl
    pr_set_pdeathsig = 1

    def set_pdeathsig() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return set_pdeathsig
