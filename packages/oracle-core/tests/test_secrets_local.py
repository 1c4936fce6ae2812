"""The local secrets store: a user's secrets on one machine, encrypted at rest.

Names are listed, values reach only ``get_values``; the database alone never reveals a
value; one user never reads another's; the runtime's reserved names stay hidden.
"""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from pathlib import Path

import pytest

from oracle_core import (
    SECRETS_PER_USER,
    LocalSecretsService,
    NotConfiguredError,
    SecretsError,
    SqliteSecretsService,
    UserInfo,
)

ALICE = UserInfo(did="did:key:z6MkAlice")
BOB = UserInfo(did="did:key:z6MkBob")
VALUE = "sk-live-0f9e8d7c6b5a"


async def test_names_are_listed_and_values_read_only_by_their_owner(tmp_path: Path) -> None:
    store = SqliteSecretsService(tmp_path / "secrets.db")
    try:
        alice = store.for_user(ALICE)
        await alice.put("OPENAI_KEY", VALUE)
        await alice.put("GITHUB_TOKEN", "ghp-1")
        assert [e.name for e in await alice.get_index()] == ["GITHUB_TOKEN", "OPENAI_KEY"]
        assert all(e.updated_at for e in await alice.get_index())
        assert await alice.get_values(["OPENAI_KEY", "MISSING"]) == {"OPENAI_KEY": VALUE}
        bob = store.for_user(BOB)
        assert await bob.get_index() == []
        assert await bob.get_values(["OPENAI_KEY"]) == {}

        await alice.put("OPENAI_KEY", "sk-rotated")
        assert await alice.get_values(["OPENAI_KEY"]) == {"OPENAI_KEY": "sk-rotated"}
        assert await alice.delete("OPENAI_KEY") is True
        assert await alice.delete("OPENAI_KEY") is False
        assert [e.name for e in await alice.get_index()] == ["GITHUB_TOKEN"]
    finally:
        await store.aclose()


def check_at_rest(path: Path, key_file: Path) -> None:
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, value FROM user_secrets").fetchall()
    assert rows[0][0] == "OPENAI_KEY"
    assert VALUE.encode() not in bytes(rows[0][1])
    assert VALUE.encode() not in path.read_bytes()


async def test_values_are_encrypted_at_rest_and_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "secrets.db"
    store = SqliteSecretsService(path)
    await store.for_user(ALICE).put("OPENAI_KEY", VALUE)
    await store.aclose()

    key_file = Path(f"{path}.key")
    check_at_rest(path, key_file)

    reopened = SqliteSecretsService(path)
    try:
        assert await reopened.for_user(ALICE).get_values(["OPENAI_KEY"]) == {"OPENAI_KEY": VALUE}
    finally:
        await reopened.aclose()

    # Without the key the value is gone, not garbage: absent, and the name still listed.
    await asyncio.to_thread(key_file.unlink)
    rekeyed = SqliteSecretsService(path)
    try:
        assert await rekeyed.for_user(ALICE).get_values(["OPENAI_KEY"]) == {}
        assert [e.name for e in await rekeyed.for_user(ALICE).get_index()] == ["OPENAI_KEY"]
    finally:
        await rekeyed.aclose()


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("", "v", "secrets.bad_name"),
        ("1ABC", "v", "secrets.bad_name"),
        ("HAS-DASH", "v", "secrets.bad_name"),
        ("A" * 65, "v", "secrets.bad_name"),
        ("OK", "", "secrets.too_large"),
        ("OK", "x" * 16_385, "secrets.too_large"),
    ],
)
async def test_bad_names_and_values_are_refused(
    tmp_path: Path, name: str, value: str, code: str
) -> None:
    store = SqliteSecretsService(tmp_path / "secrets.db")
    try:
        with pytest.raises(SecretsError) as refused:
            await store.for_user(ALICE).put(name, value)
        assert refused.value.code == code
        assert await store.for_user(ALICE).get_index() == []
    finally:
        await store.aclose()


async def test_a_user_has_at_most_the_cap_and_may_still_replace(tmp_path: Path) -> None:
    store = SqliteSecretsService(tmp_path / "secrets.db")
    try:
        alice = store.for_user(ALICE)
        for n in range(SECRETS_PER_USER):
            await alice.put(f"S{n}", "v")
        with pytest.raises(SecretsError) as refused:
            await alice.put("ONE_MORE", "v")
        assert refused.value.code == "secrets.too_many"
        await alice.put("S0", "replaced")  # replacing is not adding
        assert await alice.get_values(["S0"]) == {"S0": "replaced"}
        await store.for_user(BOB).put("S0", "bob's own")  # the cap is per user
    finally:
        await store.aclose()


async def test_reserved_names_never_reach_plugins(tmp_path: Path) -> None:
    store = SqliteSecretsService(tmp_path / "secrets.db")
    fixed = LocalSecretsService(values_by_user={ALICE.did: {"BYO_LLM_OPENAI_API_KEY": "k"}})
    try:
        await store.for_user(ALICE).put("BYO_LLM_OPENAI_API_KEY", "k")
        for accessor in (store.for_user(ALICE), fixed.for_user(ALICE)):
            assert await accessor.get_index() == []
            assert await accessor.get_values(["BYO_LLM_OPENAI_API_KEY"]) == {}
        with pytest.raises(NotConfiguredError):
            await fixed.for_user(ALICE).put("X", "y")
    finally:
        await store.aclose()
