"""The boot is a sequence of builders on one exit stack: wherever it fails, nothing stays open.

Each test boots a full oracle — IXO backend with the Matrix layer, and in the replicas
case PostgreSQL storage with Redis for the run log, turn locks, rate limits, the replica
bus and the socket.io rooms — with a fault injected after one builder has run (so what it
opened is registered and open), then checks that every file descriptor, thread and task
opened since the baseline is gone and that no ``ResourceWarning`` was raised.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oracle_server import _boot as boot
from oracle_server import create_oracle_app
from oracle_server.testing import unreachable_ixo_env

IXO_ENV = unreachable_ixo_env("Boot")


class InjectedFault(Exception):
    """Raised by the test right after a builder returned."""


@dataclass(frozen=True)
class Snapshot:
    """What the process holds open."""

    fds: frozenset[str]
    threads: frozenset[int]
    tasks: frozenset[asyncio.Task[Any]]

    @classmethod
    def now(cls) -> Snapshot:
        current = asyncio.current_task()
        return cls(
            fds=frozenset(os.listdir("/proc/self/fd")),
            threads=frozenset(t.ident or 0 for t in threading.enumerate()),
            tasks=frozenset(t for t in asyncio.all_tasks() if t is not current),
        )

    def opened_since(self, baseline: Snapshot) -> dict[str, Any]:
        """What is open now and was not at ``baseline``, as readable descriptions."""
        extra: dict[str, Any] = {}
        fds = sorted(self.fds - baseline.fds)
        if fds:
            extra["fds"] = {fd: _fd_target(fd) for fd in fds}
        threads = self.threads - baseline.threads
        if threads:
            extra["threads"] = [t.name for t in threading.enumerate() if t.ident in threads]
        tasks = self.tasks - baseline.tasks
        if tasks:
            extra["tasks"] = sorted(t.get_name() + ": " + repr(t.get_coro()) for t in tasks)
        return extra


def _fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "(closed while listing)"


async def settled(baseline: Snapshot) -> dict[str, Any]:
    """What stays open beyond ``baseline`` once closing work has had its chance to run.

    Cancelled tasks end at the loop's next turns and worker threads exit after their
    connection closed, so the check waits for them (up to 5 s) rather than racing them.
    """
    extra: dict[str, Any] = {}
    for _ in range(100):
        await asyncio.sleep(0.05)
        gc.collect()
        extra = Snapshot.now().opened_since(baseline)
        if not extra:
            break
    return extra


@pytest.fixture(params=["embedded", "replicas"])
def boot_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """An IXO oracle with the Matrix layer: embedded (SQLite, in-process replicas), or
    with PostgreSQL and Redis behind every shared part."""
    env = {**IXO_ENV, "SQLITE_DATABASE_PATH": str(tmp_path / "data")}
    if request.param == "replicas":
        database = os.environ.get("ORACLE_TEST_DATABASE_URL")
        redis = os.environ.get("ORACLE_TEST_REDIS_URL")
        if not (database and redis):
            pytest.skip(
                "needs PostgreSQL and Redis: set ORACLE_TEST_DATABASE_URL and ORACLE_TEST_REDIS_URL"
            )
        env |= {"DATABASE_URL": database, "REDIS_URL": redis, "SOCKETIO_MESSAGE_QUEUE": redis}
    return env


async def boot_and_close(env: dict[str, str]) -> None:
    app = await create_oracle_app(
        {"name": "Boot"}, env=env, discover_entry_points=False, require_llm=False
    )
    assert app.state.matrix is not None  # the Matrix builder ran
    await app.aclose()


@pytest.fixture
def no_resource_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Records every warning of the test and fails it on a ``ResourceWarning``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def fail_after(name: str, calls: list[str]) -> Callable[..., Any]:
    """``name``'s builder, run for real, then a fault (sync or async like the builder)."""
    real = getattr(boot, name)
    if asyncio.iscoroutinefunction(real):

        async def async_then_fail(*args: Any, **kwargs: Any) -> Any:
            await real(*args, **kwargs)
            calls.append(name)
            raise InjectedFault(name)

        return async_then_fail

    def then_fail(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        calls.append(name)
        raise InjectedFault(name)

    return then_fail


async def test_a_booted_oracle_closes_everything_it_opened(
    boot_env: dict[str, str], no_resource_warnings: list[warnings.WarningMessage]
) -> None:
    await boot_and_close(boot_env)  # first boot: imports and process-wide caches settle
    baseline = Snapshot.now()

    await boot_and_close(boot_env)

    assert await settled(baseline) == {}


@pytest.mark.parametrize("builder", boot.BUILDERS)
async def test_a_failing_builder_closes_everything_opened_before_it(
    boot_env: dict[str, str],
    builder: str,
    monkeypatch: pytest.MonkeyPatch,
    no_resource_warnings: list[warnings.WarningMessage],
) -> None:
    await boot_and_close(boot_env)
    baseline = Snapshot.now()
    calls: list[str] = []
    monkeypatch.setattr(boot, builder, fail_after(builder, calls))

    with pytest.raises(InjectedFault):
        await create_oracle_app(
            {"name": "Boot"}, env=boot_env, discover_entry_points=False, require_llm=False
        )

    assert calls == [builder]  # the boot ran the real builder, once, before failing
    assert await settled(baseline) == {}


def test_every_builder_is_a_function_of_the_boot_module() -> None:
    assert len(set(boot.BUILDERS)) == len(boot.BUILDERS)
    for name in boot.BUILDERS:
        assert callable(getattr(boot, name)), name


def test_a_local_oracle_never_loads_matrix_nio(tmp_path: Path) -> None:
    # matrix-nio and its dependencies are tens of MiB: only the Matrix layer loads them.
    code = f"""
import asyncio, sys
from oracle_server import create_oracle_app
from oracle_server.testing import ClockPlugin

async def main():
    app = await create_oracle_app(
        {{"name": "Local"}},
        plugins=[ClockPlugin()],
        env={{"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": {str(tmp_path)!r},
              "LLM_PROVIDER": "openai-compatible", "OPENAI_COMPATIBLE_MODEL": "m",
              "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1"}},
    )
    await app.aclose()

asyncio.run(main())
print(sorted(name for name in sys.modules if name == "nio" or name.startswith("nio.")))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
