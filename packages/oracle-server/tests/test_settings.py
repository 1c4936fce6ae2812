"""Server settings: core's variables plus the server's, every rule checked before boot."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from oracle_core import CoreEnv, EnvValidationError
from oracle_server import (
    ServerSettings,
    create_oracle_app,
    event_loop_factory,
    freeze_boot_objects,
    run,
)
from oracle_server._settings import check_replica_bus, load_settings
from oracle_server.testing import free_port

T = TypeVar("T")

# Port 9 (discard) refuses connections: a boot that tried to open it would fail otherwise.
UNREACHABLE_POSTGRES = "postgresql://nobody@127.0.0.1:9/oracle"
LOCAL = {"ORACLE_BACKEND": "local"}  # no Matrix variables needed


@pytest.mark.parametrize(
    "database_url",
    [
        UNREACHABLE_POSTGRES,
        "postgres://nobody@127.0.0.1:9/oracle",
        "postgresql+psycopg://nobody@127.0.0.1:9/oracle",
    ],
)
def test_shared_mode_without_a_queue_is_refused(database_url: str) -> None:
    settings = ServerSettings.from_env({**LOCAL, "DATABASE_URL": database_url})
    assert settings.shared_storage

    with pytest.raises(EnvValidationError) as caught:
        check_replica_bus(settings)
    with pytest.raises(EnvValidationError) as loaded:
        load_settings({**LOCAL, "DATABASE_URL": database_url})
    assert loaded.value.errors == caught.value.errors

    [line] = caught.value.errors
    assert "'SOCKETIO_MESSAGE_QUEUE'" in line
    assert "boot.replicas.queue_missing" in line
    assert "ALLOW_SINGLE_REPLICA_POSTGRES=true" in line


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DATABASE_URL": "sqlite:///tmp/oracle.db"},
        {"DATABASE_URL": UNREACHABLE_POSTGRES, "SOCKETIO_MESSAGE_QUEUE": "redis://r:6379/0"},
        {"DATABASE_URL": UNREACHABLE_POSTGRES, "ALLOW_SINGLE_REPLICA_POSTGRES": "true"},
        {"DATABASE_URL": UNREACHABLE_POSTGRES, "SOCKETIO_MESSAGE_QUEUE": "rediss://r:6380/1"},
    ],
    ids=["embedded", "sqlite-url", "postgres-with-queue", "postgres-single-replica", "tls-queue"],
)
def test_embedded_mode_a_queue_or_a_single_replica_declaration_boots(env: dict[str, str]) -> None:
    settings = load_settings({**LOCAL, **env})

    check_replica_bus(settings)

    assert settings.shared_storage == ("DATABASE_URL" in env and "postgres" in env["DATABASE_URL"])


def test_empty_values_count_as_unset() -> None:
    env = {**LOCAL, "DATABASE_URL": UNREACHABLE_POSTGRES, "SOCKETIO_MESSAGE_QUEUE": ""}
    assert ServerSettings.from_env(env).socketio_message_queue is None
    with pytest.raises(EnvValidationError):
        load_settings(env)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SOCKETIO_MESSAGE_QUEUE", "amqp://guest@rabbit//"),
        ("SOCKETIO_MESSAGE_QUEUE", "127.0.0.1:6379"),
        ("ALLOW_SINGLE_REPLICA_POSTGRES", "1"),
        ("ALLOW_SINGLE_REPLICA_POSTGRES", "True"),
        ("REDIS_URL", "http://127.0.0.1:6379"),
        ("DATABASE_URL", "mysql://root@127.0.0.1/oracle"),
        ("DATABASE_URL", "oracle.db"),
        ("DOCS_ASSET_BASE_URL", "cdn.example/swagger"),
        ("PORT", "70000"),
        ("PORT", "-1"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(EnvValidationError) as caught:
        load_settings({**LOCAL, variable: value})

    [line] = caught.value.errors
    assert f"'{variable}'" in line
    # Core's own variables are reported as core's, the server's as the server's.
    core_variables = {info.alias for info in CoreEnv.model_fields.values()}
    owner = "core" if variable in core_variables else "server"
    assert line.startswith(f"[boot-error] Plugin '{owner}' env validation failed")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DOCS_ASSET_BASE_URL", "cdn.example/swagger"),
        ("REDIS_URL", "http://127.0.0.1:6379"),
        ("DATABASE_URL", "mysql://root@127.0.0.1/oracle"),
        ("PORT", "70000"),
    ],
)
async def test_a_bad_setting_fails_the_boot_before_anything_opens(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = {**LOCAL, "SQLITE_DATABASE_PATH": str(tmp_path / "data"), variable: value}

    with pytest.raises(EnvValidationError, match=variable):
        await create_oracle_app(
            {"name": "Refused"}, env=env, discover_entry_points=False, require_llm=False
        )

    # No database, no development key: the settings are checked first.
    assert not (tmp_path / "data").exists()


def test_the_server_reads_cores_variables_with_cores_defaults_and_rules() -> None:
    server_names = {info.alias for info in ServerSettings.model_fields.values()}
    assert {info.alias for info in CoreEnv.model_fields.values()} <= server_names
    for env in ({}, {"ORACLE_BACKEND": "local"}, {"ORACLE_BACKEND": "local", "PORT": "8080"}):
        core = CoreEnv.model_validate(env)
        server = ServerSettings.model_validate(env)
        assert server.model_dump(include=set(CoreEnv.model_fields)) == core.model_dump()
    assert ServerSettings.from_env(LOCAL).sqlite_path == "./data/sqlite"


def test_the_ixo_backend_needs_cores_variables_before_the_server_boots() -> None:
    with pytest.raises(EnvValidationError) as caught:
        load_settings({"ORACLE_BACKEND": "ixo", "MATRIX_ENABLED": "false"})

    missing = [line.split("'")[3] for line in caught.value.errors]
    assert "SQLITE_DATABASE_PATH" in missing
    assert "ORACLE_DID" in missing
    assert not [var for var in missing if var.startswith("MATRIX_")]


async def test_the_boot_fails_before_opening_the_database(tmp_path: Path) -> None:
    env = {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "DATABASE_URL": UNREACHABLE_POSTGRES,
    }

    with pytest.raises(EnvValidationError, match=r"boot\.replicas\.queue_missing"):
        await create_oracle_app(
            {"name": "Refused"}, env=env, discover_entry_points=False, require_llm=False
        )

    # Nothing was created on disk either: the rule is checked first.
    assert not (tmp_path / "data").exists()


LOCAL = {"ORACLE_BACKEND": "local"}


def test_gc_freeze_at_start_is_on_by_default_and_can_be_turned_off() -> None:
    assert load_settings(LOCAL).gc_freeze_at_start is True
    assert load_settings({**LOCAL, "GC_FREEZE_AT_START": "false"}).gc_freeze_at_start is False


def test_freezing_boot_objects_empties_the_collected_generations() -> None:
    gc.unfreeze()
    try:
        frozen = freeze_boot_objects()
        counts = gc.get_count()
        tracked = len(gc.get_objects())
    finally:
        gc.unfreeze()
    assert frozen > 1000
    # Everything alive was moved out of the generations a collection walks.
    assert tracked < frozen / 100, (tracked, counts)


async def _seen_while_serving(tmp_path: Path, env: dict[str, str], probe: Callable[[], T]) -> T:
    """What ``probe`` reads once ``serve`` has started; the collector is restored after."""
    app = await create_oracle_app(
        {"name": "Collected"},
        env={**LOCAL, "SQLITE_DATABASE_PATH": str(tmp_path), **env},
        discover_entry_points=False,
        require_llm=False,
    )
    seen: list[T] = []

    async def stop_at_once() -> None:
        seen.append(probe())

    thresholds = gc.get_threshold()
    gc.unfreeze()
    try:
        await app.serve(host="127.0.0.1", port=free_port(), shutdown_trigger=stop_at_once)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    [value] = seen
    return value


@pytest.mark.parametrize(("env", "frozen"), [({}, True), ({"GC_FREEZE_AT_START": "false"}, False)])
async def test_serve_freezes_boot_objects_unless_turned_off(
    tmp_path: Path, env: dict[str, str], frozen: bool
) -> None:
    assert (await _seen_while_serving(tmp_path, env, gc.get_freeze_count) > 1000) is frozen


def test_gc_threshold_defaults_to_pythons_own_and_is_checked() -> None:
    assert load_settings(LOCAL).gc_thresholds is None
    assert load_settings({**LOCAL, "GC_THRESHOLD": " 2000,10,10 "}).gc_thresholds == (2000, 10, 10)
    assert load_settings({**LOCAL, "GC_THRESHOLD": "python"}).gc_thresholds is None
    for bad in ("0,10,10", "10000,20", "a,b,c", "10000,-1,10", "off"):
        with pytest.raises(EnvValidationError) as caught:
            load_settings({**LOCAL, "GC_THRESHOLD": bad})
        [line] = caught.value.errors
        assert "'GC_THRESHOLD'" in line
        assert "gc.bad_threshold" in line


@pytest.mark.parametrize(
    ("env", "thresholds"),
    [({"GC_THRESHOLD": "10000,10,10"}, (10_000, 10, 10)), ({}, None)],
)
async def test_serve_sets_the_collectors_thresholds(
    tmp_path: Path, env: dict[str, str], thresholds: tuple[int, int, int] | None
) -> None:
    before = gc.get_threshold()
    assert await _seen_while_serving(tmp_path, env, gc.get_threshold) == (thresholds or before)


def test_trusted_homeservers_default_to_the_oracles_own_and_are_checked() -> None:
    assert load_settings(LOCAL).trusted_homeservers("own.example") == {"own.example"}
    listed = load_settings(
        {**LOCAL, "MATRIX_TRUSTED_HOMESERVERS": " own.example, matrix.partner.org:8448 ,"}
    )
    assert listed.trusted_homeservers("own.example") == {"own.example", "matrix.partner.org:8448"}
    # Exactly the list: the oracle's own server is trusted only when listed.
    assert load_settings({**LOCAL, "MATRIX_TRUSTED_HOMESERVERS": "[::1]:8448"}).trusted_homeservers(
        "own.example"
    ) == {"[::1]:8448"}
    for bad in ("https://evil.example", "@bob:evil.example", "evil example"):
        with pytest.raises(EnvValidationError) as caught:
            load_settings({**LOCAL, "MATRIX_TRUSTED_HOMESERVERS": bad})
        [line] = caught.value.errors
        assert "'MATRIX_TRUSTED_HOMESERVERS'" in line
        assert "matrix.bad_server_name" in line


def test_served_oracles_run_on_uvloop_unless_told_otherwise() -> None:
    import uvloop

    assert event_loop_factory({}) is uvloop.new_event_loop
    assert event_loop_factory({"EVENT_LOOP": "uvloop"}) is uvloop.new_event_loop
    assert event_loop_factory({"EVENT_LOOP": "asyncio"}) is None
    assert load_settings(LOCAL).event_loop == "uvloop"

    async def loop_class() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(loop_class(), env={}).startswith("uvloop")
    assert run(loop_class(), env={"EVENT_LOOP": "asyncio"}).startswith("asyncio")


def test_an_unknown_event_loop_is_refused_before_anything_runs() -> None:
    async def never() -> None:
        raise AssertionError("ran")

    with pytest.raises(EnvValidationError, match="EVENT_LOOP") as caught:
        run(never(), env={"EVENT_LOOP": "trio"})
    assert caught.value.code == "boot.config.invalid"
    with pytest.raises(EnvValidationError, match="EVENT_LOOP"):
        load_settings({**LOCAL, "EVENT_LOOP": "trio"})


def test_turn_admission_is_fixed_unless_adaptive_is_asked() -> None:
    assert load_settings(LOCAL).turn_admission == "fixed"
    assert load_settings({**LOCAL, "TURN_ADMISSION": "adaptive"}).turn_admission == "adaptive"
    with pytest.raises(EnvValidationError, match="TURN_ADMISSION"):
        load_settings({**LOCAL, "TURN_ADMISSION": "auto"})
