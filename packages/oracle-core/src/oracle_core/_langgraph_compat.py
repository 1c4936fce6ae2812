"""The one door to the private names of LangGraph and its stack that oracle-core relies on.

LangGraph's delta-stored messages, LangSmith's runtime overrides, two LangChain extension
points and where ``aiosqlite`` runs a connection's calls have no public API that does what
the runtime needs, so oracle-core uses a few of their private names. Only this module
imports or reads them, and every other module takes them from here (the overridden
methods stay in the subclasses that override them). ``PRIVATE_NAMES`` lists each one
with what uses it, and ``packages/oracle-core/tests/test_langgraph_compat.py`` resolves
every entry: an upgrade that removes or renames one fails that test naming it, and so does
a private import anywhere else.

A name missing at import raises ``ImportError`` naming it and the supported range of its
distribution, when ``oracle_core`` is imported (or, for LangSmith, when a runtime
boots), instead of an ``AttributeError`` in the middle of a turn.

``SUPPORTED_RANGES`` is what ``packages/oracle-core/pyproject.toml`` declares (a test
keeps them equal). The LangGraph and LangSmith ranges are the ones the test suite has
run against: raise an upper bound only after running it on the new version.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NamedTuple

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = [
    "PRIVATE_NAMES",
    "SUPPORTED_RANGES",
    "DeltaSnapshot",
    "ExtHook",
    "PrivateName",
    "chain_async_model_call_handlers",
    "chain_async_tool_call_wrappers",
    "chain_model_call_handlers",
    "chain_tool_call_wrappers",
    "copy_checkpoint",
    "langsmith_aio_to_thread_override",
    "messages_delta_reducer",
    "missing_private_name",
    "msgpack_ext_hook",
    "openai_aiohttp_transport",
    "wrap_msgpack_ext_hook",
]


class PrivateName(NamedTuple):
    """One private name of a dependency, where it lives and what in oracle-core needs it.

    Attributes:
        distribution: The distribution that ships it (a key of ``SUPPORTED_RANGES``).
        module: The module it is found in.
        name: Its attribute path from ``module``; ``Class()`` stands for an instance,
            for attributes set in ``__init__``.
        used_by: What in oracle-core uses it, for the message when it goes missing.
    """

    distribution: str
    module: str
    name: str
    used_by: str

    @property
    def path(self) -> str:
        """The dotted path, module included."""
        return f"{self.module}.{self.name}"


SUPPORTED_RANGES: dict[str, str] = {
    "langgraph": ">=1.2.13,<1.3",
    "langgraph-checkpoint": ">=4.1.0,<4.4",
    "langgraph-checkpoint-sqlite": ">=3.1.0,<3.2",
    "langsmith": ">=0.14.9,<0.16",
    "langchain": ">=1.3.15,<2",
    "langchain-core": ">=1.0,<2",
    "langchain-openai": ">=1.0,<2",
    "openai": ">=3.57,<4",
    "aiosqlite": ">=0.22,<0.23",
}
"""The version range of each distribution in ``PRIVATE_NAMES``, as pyproject declares it."""

PRIVATE_NAMES: tuple[PrivateName, ...] = (
    PrivateName(
        "langgraph-checkpoint",
        "langgraph.checkpoint.serde.types",
        "_DeltaSnapshot",
        "oracle_core._serde, oracle_core._sqlite_saver and oracle_core._checkpoint,"
        " to read and write the message snapshots of a DeltaChannel",
    ),
    PrivateName(
        "langgraph",
        "langgraph.graph.message",
        "_messages_delta_reducer",
        "oracle_core._state.ThreadMessages, the reducer of the thread's DeltaChannel",
    ),
    PrivateName(
        "langgraph",
        "langgraph.pregel._checkpoint",
        "copy_checkpoint",
        "oracle_core._checkpoint.PrimedCheckpointer, to hand out its own copy of a read",
    ),
    PrivateName(
        "langchain",
        "langchain.agents.factory",
        "_chain_model_call_handlers",
        "oracle_core._middleware.chain.FrameworkChain, which composes its members' hooks"
        " as create_agent does",
    ),
    PrivateName(
        "langchain",
        "langchain.agents.factory",
        "_chain_async_model_call_handlers",
        "oracle_core._middleware.chain.FrameworkChain, which composes its members' hooks"
        " as create_agent does",
    ),
    PrivateName(
        "langchain",
        "langchain.agents.factory",
        "_chain_tool_call_wrappers",
        "oracle_core._middleware.chain.FrameworkChain, which composes its members' hooks"
        " as create_agent does",
    ),
    PrivateName(
        "langchain",
        "langchain.agents.factory",
        "_chain_async_tool_call_wrappers",
        "oracle_core._middleware.chain.FrameworkChain, which composes its members' hooks"
        " as create_agent does",
    ),
    PrivateName(
        "langsmith",
        "langsmith._runtime_overrides",
        "get_runtime_overrides",
        "oracle_core._tracing.install_untraced_fast_path, to keep an application's override",
    ),
    PrivateName(
        "langgraph-checkpoint",
        "langgraph.checkpoint.serde.jsonplus",
        "JsonPlusSerializer()._unpack_ext_hook",
        "oracle_core._serde.CheckpointSerializer, which wraps the msgpack ext hook",
    ),
    PrivateName(
        "openai",
        "openai._vendor.httpx_aiohttp",
        "AiohttpTransport",
        "oracle_core._providers, the models' HTTP client on aiohttp with TCP keepalive",
    ),
    PrivateName(
        "langchain-openai",
        "langchain_openai",
        "ChatOpenAI._get_request_payload",
        "oracle_core._chat_openai.PassthroughChatOpenAI, which overrides it",
    ),
    PrivateName(
        "langchain-core",
        "langchain_core.tools",
        "BaseTool._to_args_and_kwargs",
        "the tool adapters of oracle_core._tool_adapter, _subagents and _agent_cache,"
        " which override it",
    ),
    PrivateName(
        "langgraph-checkpoint-sqlite",
        "langgraph.checkpoint.sqlite",
        "SqliteSaver._has_task_path",
        "oracle_core._sqlite_saver.MessageStoreSqliteSaver._twin, which gives the sync saver"
        " that runs its reads in one trip what the async saver's setup found",
    ),
    PrivateName(
        "aiosqlite",
        "aiosqlite",
        "Connection._execute",
        "oracle_core._sqlite_connection.PooledConnection, which overrides it (every call of"
        " a connection goes through it), and the one-trip reads and writes that call it",
    ),
    PrivateName(
        "aiosqlite",
        "aiosqlite",
        "Connection._connect",
        "oracle_core._sqlite_connection.PooledConnection, which overrides it",
    ),
    PrivateName(
        "aiosqlite",
        "aiosqlite",
        "Connection._conn",
        "oracle_core._sqlite_connection.PooledConnection, which overrides it (a property"
        " the cursor and connection methods read)",
    ),
)
"""Every private name of a dependency that oracle-core uses.

Nine are imported below (LangSmith's and the OpenAI SDK's on first use). The msgpack ext
hook is an instance attribute, read and replaced only by the functions below.
``SqliteSaver._has_task_path`` is a flag that the async saver's setup sets and the sync
saver's reads consult. The last five are members oracle-core's subclasses override
(LangChain's documented ``BaseTool._run``/``_arun`` and ``BaseChatModel._generate``
extension points are not listed); nothing imports them, so only the test watches them.
"""

_BY_PATH = {entry.path: entry for entry in PRIVATE_NAMES}


def missing_private_name(path: str) -> ImportError:
    """The error for a name of ``PRIVATE_NAMES`` that the installed distribution lacks.

    Args:
        path: The entry's dotted path (``PrivateName.path``).

    Returns:
        An ``ImportError`` naming the path, what uses it, the installed version and the
        supported range, with the command that installs one in range.
    """
    entry = _BY_PATH[path]
    dist = entry.distribution
    wanted = f"{dist}{SUPPORTED_RANGES[dist]}"
    try:
        installed = f"{dist} {version(dist)}"
    except PackageNotFoundError:
        installed = f"this environment (no {dist} distribution)"
    return ImportError(
        f"dependency.private_name_missing: {installed} has no {path}, which oracle-core"
        f" uses in {entry.used_by}; oracle-core supports {wanted}:"
        f" install it with `pip install '{wanted}'`"
    )


# `from module import name` raises ImportError whether the module or the name is gone.
try:
    # The value a DeltaChannel snapshot is stored as. LangGraph's saver contract
    # (`BaseCheckpointSaver.get_delta_channel_history`, `prune`) asks savers to recognise
    # and write `_DeltaSnapshot(value)`; there is no public alias.
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
except ImportError as exc:
    raise missing_private_name("langgraph.checkpoint.serde.types._DeltaSnapshot") from exc

try:
    # The batch reducer DeltaChannel needs for messages (`add_messages` takes one update
    # at a time). LangGraph's own DeltaChannel docs import it from this module, and its
    # loop recognises the channel by this very function (to give messages their ids),
    # so it is re-exported as is, never wrapped.
    from langgraph.graph.message import _messages_delta_reducer as messages_delta_reducer
except ImportError as exc:
    raise missing_private_name("langgraph.graph.message._messages_delta_reducer") from exc

try:
    # The copy LangGraph's loop makes of the checkpoints it reads. The public
    # `langgraph.checkpoint.base.copy_checkpoint` adds the pre-v4 `pending_sends` key, so
    # its copy would not be the checkpoint the wrapped saver returned.
    from langgraph.pregel._checkpoint import copy_checkpoint
except ImportError as exc:
    raise missing_private_name("langgraph.pregel._checkpoint.copy_checkpoint") from exc


_CHAINS = (
    "_chain_model_call_handlers",
    "_chain_async_model_call_handlers",
    "_chain_tool_call_wrappers",
    "_chain_async_tool_call_wrappers",
)


def _first_missing(module: str, names: tuple[str, ...]) -> str:
    """The path of the first of ``names`` that ``module`` lacks (its first, if it is gone)."""
    import importlib

    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return f"{module}.{names[0]}"
    return next((f"{module}.{n}" for n in names if not hasattr(loaded, n)), f"{module}.{names[0]}")


try:
    # How create_agent composes the middleware's wrap_* hooks (first outermost, each
    # layer's commands kept). FrameworkChain runs several framework middleware as one
    # with exactly this composition; LangChain exports no public composer.
    from langchain.agents.factory import (
        _chain_async_model_call_handlers as chain_async_model_call_handlers,
    )
    from langchain.agents.factory import (
        _chain_async_tool_call_wrappers as chain_async_tool_call_wrappers,
    )
    from langchain.agents.factory import _chain_model_call_handlers as chain_model_call_handlers
    from langchain.agents.factory import _chain_tool_call_wrappers as chain_tool_call_wrappers
except ImportError as exc:
    raise missing_private_name(_first_missing("langchain.agents.factory", _CHAINS)) from exc


def langsmith_aio_to_thread_override() -> Callable[..., Any] | None:
    """The ``aio_to_thread`` override installed in LangSmith, if any.

    LangSmith exports ``set_runtime_overrides`` but no getter; reading the current value
    is how the runtime leaves an application's own override in place. The private module
    is imported on the first call, when a runtime boots, so that ``import oracle_core``
    does not depend on it.

    Returns:
        The installed override, or ``None`` when LangSmith runs its default.

    Raises:
        ImportError: The installed LangSmith has no ``get_runtime_overrides``.
    """
    try:
        from langsmith._runtime_overrides import get_runtime_overrides
    except ImportError as exc:
        raise missing_private_name("langsmith._runtime_overrides.get_runtime_overrides") from exc
    override: Callable[..., Any] | None = get_runtime_overrides().aio_to_thread
    return override


def openai_aiohttp_transport() -> type[Any]:
    """The OpenAI SDK's httpx2 transport over aiohttp.

    ``openai.DefaultAioHttpClient`` is public and builds this transport itself, but with
    no way to set socket options; building the transport (whose public ``client``
    argument takes the ``aiohttp.ClientSession`` to run on) is how the runtime keeps TCP
    keepalive on the models' connections. Imported on the first call, so that
    ``import oracle_core`` does not import aiohttp.

    Raises:
        ImportError: The installed OpenAI SDK has no vendored aiohttp transport.
    """
    try:
        from openai._vendor.httpx_aiohttp import AiohttpTransport
    except ImportError as exc:
        raise missing_private_name("openai._vendor.httpx_aiohttp.AiohttpTransport") from exc
    transport: type[Any] = AiohttpTransport
    return transport


ExtHook = Callable[[int, bytes], Any]
"""A msgpack ext hook: ``(ext type code, data) -> decoded value``."""

_EXT_HOOK = "langgraph.checkpoint.serde.jsonplus.JsonPlusSerializer()._unpack_ext_hook"


def msgpack_ext_hook(serializer: JsonPlusSerializer) -> ExtHook:
    """The hook ``serializer`` decodes msgpack ext types with.

    ``JsonPlusSerializer`` builds it from its allowlist with a private function, and its
    public ``__unpack_ext_hook__`` argument replaces that hook instead of wrapping it.

    Raises:
        ImportError: The installed LangGraph keeps the hook elsewhere.
    """
    try:
        hook: ExtHook = serializer._unpack_ext_hook
    except AttributeError as exc:
        raise missing_private_name(_EXT_HOOK) from exc
    return hook


def wrap_msgpack_ext_hook(
    serializer: JsonPlusSerializer, wrap: Callable[[ExtHook], ExtHook]
) -> None:
    """Make ``serializer`` decode msgpack ext types with ``wrap(current hook)``.

    Raises:
        ImportError: The installed LangGraph keeps the hook elsewhere.
    """
    serializer._unpack_ext_hook = wrap(msgpack_ext_hook(serializer))
