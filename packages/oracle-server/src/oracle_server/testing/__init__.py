"""The server's testing kit: doubles that speak the real protocols on loopback, ports of the
client's parsers, and the handles that integration tests and benchmarks measure.

Doubles and servers:

- `OpenAIDouble`: a scripted OpenAI chat-completions server (JSON, SSE streaming, tool
  calls) to use as the oracle's model through ``LLM_PROVIDER=openai-compatible``;
  `delegating(...)` scripts a turn that hands a task to a sub-agent.
- `BlocksyncDouble`: Blocksync's GraphQL endpoint serving ``did:ixo`` documents.
- `LoopbackServer`: any Starlette app served by Hypercorn on ``127.0.0.1``.
- `Synapse`: a real Matrix homeserver from PyPI in a cached virtual environment;
  `provision_oracle`, `node_env`, `oracle_node`, `matrix_user` and `user_headers` run
  oracle nodes and users against it; `fresh_localpart` keeps users of a shared
  homeserver apart.
- `serving(app)`: an ``OracleApp`` on loopback for the duration of a block;
  `auth_headers(user, oracle_did)`: headers of a development auth invocation.
- `RunningOracle`: an oracle served for the socket.io gateway's tests; its `OracleUser`
  users connect with `SocketClient` (the Socket.IO protocol packet by packet over a
  websocket) or `NodeSocketClient` (a Node ``socket.io-client`` script).
  `EventRecords` records and awaits the events any client receives.

Services:

- `redis_url_or_skip()`: the tests' Redis (``ORACLE_TEST_REDIS_URL``) or a skip naming the
  variable; `redis_test_target(label)`: that URL with a key prefix of the test's own
  (`RedisTestTarget`), whose keys are deleted afterwards; `unique_key_prefix(label)`.

Pytest fixtures (`synapse`, `own_synapse`, `new_user`, `oracle_account`, `blocksync`) are in
``oracle_server.testing.pytest_plugin``; a suite's root ``conftest.py`` activates them with
``pytest_plugins = ["oracle_server.testing.pytest_plugin"]``.

Plugins to serve: `ClockPlugin` (always visible), `WeatherPlugin` (on demand) and
`Announcer` (emits one client event of every kind).

- `connected_workers(n)`: the hub of ``oracle serve --workers`` and ``n`` worker
  connections to it, in one process, for the hub backends' tests.

- `TcpProxy`: a relay in front of PostgreSQL or Redis that a test can cut or take down.
- `unreachable_ixo_env(name)`: every variable ``ORACLE_BACKEND=ixo`` requires, every URL
  on a port that refuses (boot and settings tests).
- `serving_ixo_oracle(identity, plugins, data_dir=…, grants=…)`: an oracle served in ixo
  mode without Matrix, with a signed-in user whose delegation (``grants``) is stored; an
  `IxoOracle` (``http``, ``new_session()``, ``send()``). `IxoIdentity(slug)` gives the
  DIDs, the mnemonic and the ``verifier()`` the service doubles check the oracle with.

Protocol checks:

- `PersistentSseParser` / `PerReadSseParser`: the SSE parsers of client SDK 1.4.0 and
  1.1.x, to check that the server's SSE body reads the same with both (SRV-70 b).

Test-suite checks:

- `unclosed_resources()`: the sockets, asyncio transports, event loops, child processes
  and SQLite connections still open, with what holds each; the root ``conftest.py``
  fails a test run that leaves any (they would warn only at interpreter exit).

Internals that integration tests and benchmarks drive or measure directly (not for
plugins or hosts: their shape may change with the server):

- `TurnInput` and `follow_run`: start a turn on ``app.state.runner`` and read its run
  log as a response would, without HTTP; `MemoryRunLog`: the in-memory run log.
- `CheckpointBackup`, `backup_key`, `prepare_upload`, `commit_upload`, `read_chain`: the
  Matrix backup of per-user files and its sealed page snapshots.
- `user_room_alias`: the alias of a user's Matrix room.
"""

from typing import TYPE_CHECKING

from oracle_server._lazy import lazy_attributes
from oracle_server._persistence.snapshot import (
    backup_key,
    commit_upload,
    prepare_upload,
    read_chain,
)
from oracle_server._turns.runlog import MemoryRunLog
from oracle_server._turns.runlog import follow as follow_run
from oracle_server._turns.runner import TurnInput
from oracle_server.testing._blocksync import BlocksyncDouble
from oracle_server.testing._env import unreachable_ixo_env
from oracle_server.testing._ixo import IxoIdentity, IxoOracle, serving_ixo_oracle
from oracle_server.testing._loopback import LoopbackServer
from oracle_server.testing._matrix import (
    ENTITY_DID,
    NewUser,
    OracleAccount,
    eventually,
    fresh_localpart,
    matrix_user,
    node_env,
    open_user_room,
    oracle_node,
    provision_oracle,
    provision_secrets_key,
    random_mnemonic,
    user_headers,
    wait_ready,
)
from oracle_server.testing._openai_double import (
    ChatRequest,
    OpenAIDouble,
    Paced,
    Step,
    ToolCalls,
    delegating,
)
from oracle_server.testing._plugins import (
    Announcer,
    CityArgs,
    ClockPlugin,
    SecretProbePlugin,
    SessionListener,
    WeatherPlugin,
)
from oracle_server.testing._proxy import TcpProxy
from oracle_server.testing._redis import (
    REDIS_URL_VARIABLE,
    RedisTestTarget,
    redis_test_target,
    redis_url_or_skip,
    unique_key_prefix,
)
from oracle_server.testing._resources import UnclosedResource, unclosed_resources
from oracle_server.testing._server import auth_headers, free_port, serving
from oracle_server.testing._socket_client import (
    EVENT_WAIT,
    EventRecords,
    HandshakeRefusedError,
    NodeSocketClient,
    SocketClient,
)
from oracle_server.testing._socket_oracle import OracleUser, RunningOracle, StartOracle
from oracle_server.testing._sse import (
    ACCEPTED_EVENTS,
    PER_READ_ACCEPTED_EVENTS,
    PerReadSseParser,
    PersistentSseParser,
    SseEvent,
    frame_boundaries,
    parse_stream,
    split_everywhere,
)
from oracle_server.testing._synapse import RegisteredUser, Synapse
from oracle_server.testing._synapse_venv import SYNAPSE_VERSION, SynapseError, ensure_synapse_venv
from oracle_server.testing._workers import connected_workers

if TYPE_CHECKING:
    from oracle_server._matrix.backup import CheckpointBackup
    from oracle_server._matrix.rooms import user_room_alias

# Loaded on first use: they import matrix-nio, which a process serving no Matrix (a
# benchmark's oracle) should not pay for.
_MATRIX_NAMES = {
    "CheckpointBackup": "oracle_server._matrix.backup",
    "user_room_alias": "oracle_server._matrix.rooms",
}


__getattr__ = lazy_attributes(globals(), __name__, _MATRIX_NAMES)


__all__ = [
    "ACCEPTED_EVENTS",
    "ENTITY_DID",
    "EVENT_WAIT",
    "PER_READ_ACCEPTED_EVENTS",
    "REDIS_URL_VARIABLE",
    "SYNAPSE_VERSION",
    "Announcer",
    "BlocksyncDouble",
    "ChatRequest",
    "CheckpointBackup",
    "CityArgs",
    "ClockPlugin",
    "EventRecords",
    "HandshakeRefusedError",
    "IxoIdentity",
    "IxoOracle",
    "LoopbackServer",
    "MemoryRunLog",
    "NewUser",
    "NodeSocketClient",
    "OpenAIDouble",
    "OracleAccount",
    "OracleUser",
    "Paced",
    "PerReadSseParser",
    "PersistentSseParser",
    "RedisTestTarget",
    "RegisteredUser",
    "RunningOracle",
    "SecretProbePlugin",
    "SessionListener",
    "SocketClient",
    "SseEvent",
    "StartOracle",
    "Step",
    "Synapse",
    "SynapseError",
    "TcpProxy",
    "ToolCalls",
    "TurnInput",
    "UnclosedResource",
    "WeatherPlugin",
    "auth_headers",
    "backup_key",
    "commit_upload",
    "connected_workers",
    "delegating",
    "ensure_synapse_venv",
    "eventually",
    "follow_run",
    "frame_boundaries",
    "free_port",
    "fresh_localpart",
    "matrix_user",
    "node_env",
    "open_user_room",
    "oracle_node",
    "parse_stream",
    "prepare_upload",
    "provision_oracle",
    "provision_secrets_key",
    "random_mnemonic",
    "read_chain",
    "redis_test_target",
    "redis_url_or_skip",
    "serving",
    "serving_ixo_oracle",
    "split_everywhere",
    "unclosed_resources",
    "unique_key_prefix",
    "unreachable_ixo_env",
    "user_headers",
    "user_room_alias",
    "wait_ready",
]
