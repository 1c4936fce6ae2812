"""The plugins' key-value store on Redis (``REDIS_URL``): one user's entries in a hash.

Per user: ``<prefix><user>:v`` (field ``<namespace>\\0<key>`` → encoded value),
``<prefix><user>:e`` (field → expiry, milliseconds since the epoch, for entries that
have one) and ``<prefix><user>:b`` (the bytes held: fields plus values). A write runs as
one Lua script: it drops the user's expired entries, checks the key and byte caps
against what the write would leave, and writes, so replicas sharing the Redis can never
pass a cap together. Redis 7.0 has no per-field expiry, hence the expiry hash.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from oracle_core import KvLimits, KvWrite

__all__ = ["RedisKvBackend"]

_PURGE = """
local expiries = redis.call('HGETALL', KEYS[2])
for i = 1, #expiries, 2 do
  if tonumber(expiries[i + 1]) <= tonumber(ARGV[1]) then
    local old = redis.call('HGET', KEYS[1], expiries[i])
    if old then
      redis.call('DECRBY', KEYS[3], #old + #expiries[i])
      redis.call('HDEL', KEYS[1], expiries[i])
    end
    redis.call('HDEL', KEYS[2], expiries[i])
  end
end
"""

_PUT = (
    "-- KEYS: values, expiries, bytes; ARGV: now, field, data, expires_at, max_keys, max_bytes"
    + _PURGE
    + """
local field, data = ARGV[2], ARGV[3]
local old = redis.call('HGET', KEYS[1], field)
local count = redis.call('HLEN', KEYS[1])
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local after = used + #field + #data
if old then
  after = after - #field - #old
else
  count = count + 1
end
if count > tonumber(ARGV[5]) then return 'keys' end
if after > tonumber(ARGV[6]) then return 'bytes' end
redis.call('HSET', KEYS[1], field, data)
redis.call('SET', KEYS[3], after)
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[2], field)
else
  redis.call('HSET', KEYS[2], field, ARGV[4])
end
return 'ok'
"""
)

_DELETE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DECRBY', KEYS[3], #old + #ARGV[1])
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
return 1
"""

_SEPARATOR = "\x00"


class RedisKvBackend:
    """``KvBackend`` on Redis, for replicas sharing one store.

    Args:
        redis: The server's client (``redis_client``).
        prefix: Key prefix (tests give each run its own).
    """

    def __init__(self, redis: Redis, *, prefix: str = "oracle:kv:") -> None:
        self._redis = redis
        self._prefix = prefix
        self._put: Any = redis.register_script(_PUT)
        self._delete: Any = redis.register_script(_DELETE)

    def _keys(self, user: str) -> list[str]:
        base = f"{self._prefix}{user}"
        return [f"{base}:v", f"{base}:e", f"{base}:b"]

    async def get(self, user: str, namespace: str, key: str, now: float) -> bytes | None:
        values, expiries, _ = self._keys(user)
        field = f"{namespace}{_SEPARATOR}{key}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(values, field)
            pipe.hget(expiries, field)
            data, expires = await pipe.execute()
        if data is None or (expires is not None and int(expires) <= now * 1000):
            return None
        return bytes(data)

    async def put(
        self,
        user: str,
        namespace: str,
        key: str,
        data: bytes,
        expires_at: float | None,
        now: float,
        limits: KvLimits,
    ) -> KvWrite:
        field = f"{namespace}{_SEPARATOR}{key}"
        expires = "" if expires_at is None else str(int(expires_at * 1000))
        result = await self._put(
            keys=self._keys(user),
            args=[int(now * 1000), field, data, expires, limits.max_keys, limits.max_bytes],
        )
        text = result.decode() if isinstance(result, bytes) else str(result)
        return "ok" if text == "ok" else ("keys" if text == "keys" else "bytes")

    async def delete(self, user: str, namespace: str, key: str) -> bool:
        field = f"{namespace}{_SEPARATOR}{key}"
        return bool(await self._delete(keys=self._keys(user), args=[field]))

    async def keys(self, user: str, namespace: str, prefix: str, now: float) -> list[str]:
        values, expiries, _ = self._keys(user)
        start = f"{namespace}{_SEPARATOR}{prefix}"
        raw: list[Any] = await self._redis.hkeys(values)
        fields = [f.decode() if isinstance(f, bytes) else str(f) for f in raw]
        wanted = sorted(f for f in fields if f.startswith(start))
        if not wanted:
            return []
        expires = await self._redis.hmget(expiries, wanted)
        cutoff = now * 1000
        skip = len(namespace) + 1
        return [
            field[skip:]
            for field, expiry in zip(wanted, expires, strict=True)
            if expiry is None or int(expiry) > cutoff
        ]

    async def aclose(self) -> None:
        await self._redis.aclose()
