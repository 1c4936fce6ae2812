"""The Redis of the tests: its URL from ``ORACLE_TEST_REDIS_URL``, or a skip naming it.

The Redis is shared (other developers, other test runs): each test works under a key
prefix or channel of its own, and only its own keys are deleted afterwards, never the
database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

__all__ = [
    "REDIS_URL_VARIABLE",
    "RedisTestTarget",
    "redis_test_target",
    "redis_url_or_skip",
    "unique_key_prefix",
]

REDIS_URL_VARIABLE = "ORACLE_TEST_REDIS_URL"
"""The variable that enables the tests needing Redis (``.ci/run`` sets it)."""


def redis_url_or_skip() -> str:
    """The Redis URL of the tests, or skip the calling test with the variable to set.

    Returns:
        The value of ``ORACLE_TEST_REDIS_URL``.

    Raises:
        pytest.skip.Exception: The variable is unset or empty (the skip names it).
    """
    url = os.environ.get(REDIS_URL_VARIABLE)
    if not url:
        import pytest  # only the tests call this; the server does not depend on pytest

        pytest.skip(f"needs Redis: set {REDIS_URL_VARIABLE} (e.g. redis://127.0.0.1:6379/0)")
    return url


def unique_key_prefix(label: str) -> str:
    """A key prefix (or channel name) no other test or test run uses.

    Args:
        label: What the keys are for, e.g. ``"rl"``; it makes stray keys recognisable.

    Returns:
        ``oracle-test:<label>:<random hex>:``.
    """
    return f"oracle-test:{label}:{uuid.uuid4().hex}:"


@dataclass(frozen=True)
class RedisTestTarget:
    """A Redis URL and a key prefix of one test.

    Attributes:
        url: The Redis URL (``ORACLE_TEST_REDIS_URL``).
        prefix: The test's own key prefix; use it as the backends' ``prefix``.
    """

    url: str
    prefix: str

    def delete_keys(self) -> int:
        """Delete every key under the prefix (and nothing else).

        A synchronous client, so the cleanup does not depend on the test's event loop.

        Returns:
            How many keys were deleted.
        """
        with redis.Redis.from_url(self.url) as client:
            keys = list(client.scan_iter(match=self.prefix + "*", count=1000))
            return int(client.delete(*keys)) if keys else 0


@contextmanager
def redis_test_target(label: str) -> Iterator[RedisTestTarget]:
    """The test's Redis and key prefix; its keys are deleted when the block ends.

    Use it in a fixture: ``with redis_test_target("rl") as target: yield target``.

    Args:
        label: What the keys are for (see :func:`unique_key_prefix`).

    Yields:
        The URL and a prefix unique to this use.

    Raises:
        pytest.skip.Exception: ``ORACLE_TEST_REDIS_URL`` is unset (the skip names it).
    """
    target = RedisTestTarget(redis_url_or_skip(), unique_key_prefix(label))
    try:
        yield target
    finally:
        target.delete_keys()
