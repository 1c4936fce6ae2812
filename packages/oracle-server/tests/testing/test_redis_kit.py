"""Tests of the testing kit's Redis helpers: the skip names the variable, cleanup is scoped."""

from __future__ import annotations

import pytest
import redis

from oracle_server.testing import (
    REDIS_URL_VARIABLE,
    redis_test_target,
    redis_url_or_skip,
    unique_key_prefix,
)


def test_without_the_variable_the_skip_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_URL_VARIABLE, raising=False)

    with pytest.raises(pytest.skip.Exception, match=REDIS_URL_VARIABLE):
        redis_url_or_skip()


def test_with_the_variable_its_url_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REDIS_URL_VARIABLE, "redis://127.0.0.1:1/5")

    assert redis_url_or_skip() == "redis://127.0.0.1:1/5"


def test_prefixes_are_unique_and_labelled() -> None:
    first, second = unique_key_prefix("rl"), unique_key_prefix("rl")

    assert first != second
    assert first.startswith("oracle-test:rl:")
    assert first.endswith(":")


def test_a_target_deletes_its_own_keys_only() -> None:
    with redis_test_target("kit") as neighbour, redis.Redis.from_url(neighbour.url) as client:
        client.set(neighbour.prefix + "stays", "1")
        with redis_test_target("kit") as target:
            client.set(target.prefix + "a", "1")
            client.set(target.prefix + "b:c", "1")
        assert client.exists(target.prefix + "a", target.prefix + "b:c") == 0
        assert client.exists(neighbour.prefix + "stays") == 1
