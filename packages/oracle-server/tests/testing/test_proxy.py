"""`TcpProxy` in front of the real Redis: relays, drops every connection, goes down and back."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from oracle_server.testing import TcpProxy, redis_url_or_skip, unique_key_prefix


async def test_the_proxy_relays_cuts_and_goes_down_and_back() -> None:
    url = redis_url_or_skip()
    key = unique_key_prefix("proxy")
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        assert proxy.url(url) == f"redis://127.0.0.1:{proxy.port}/0"
        client = Redis.from_url(proxy.url(url), retry_on_error=[], retry=None)
        try:
            await client.set(key, "1", ex=60)
            assert await client.get(key) == b"1"

            await proxy.cut()  # the open connection drops
            with pytest.raises(RedisConnectionError):
                await client.get(key)
            assert await client.get(key) == b"1"  # a new connection gets through

            async with proxy.down():
                with pytest.raises(RedisConnectionError):
                    await client.get(key)
            assert await client.get(key) == b"1"  # back, on the same port
        finally:
            await client.delete(key)
            await client.aclose()
