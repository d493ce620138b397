"""``RedisStore``: bindings in Redis, for several application replicas.

Needs the ``redis`` extra (``pip install 'sandbox-provider-sdk[redis]'``); the driver is imported
when the store first connects. Each binding is a hash ``{prefix}binding:{owner}`` with a
``version`` field; a set ``{prefix}owners`` indexes them. Compare-and-set and
compare-and-delete are Lua scripts, which Redis runs atomically; a claim is a key
``{prefix}claim:{name}`` holding the holder's token with a ``PX`` expiry, taken (or
renewed by its holder) by a script that sets it only if it is absent or already the
caller's (``SET NX`` plus renewal), and deleted by a script only for its holder. A fenced
write checks the claim's key in the same script. Claims expire by the server's clock,
which is also what :meth:`RedisStore.time` reads (``TIME``).

``open_store("redis://HOST:PORT/DB?prefix=app:")`` names the prefix in the URL.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import attrs

from provider_sdk.config import Secret
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import AuthenticationError, ConfigError, Unavailable
from provider_sdk.manager._claims import check_fence, check_owner
from provider_sdk.manager.store import Binding, BindingStore, _safe

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisStore"]

_PUT = """
local current = redis.call('HGET', KEYS[1], 'version') or '0'
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'sandbox_id', ARGV[3], 'provider', ARGV[4],
           'data', ARGV[5])
redis.call('SADD', KEYS[2], ARGV[6])
return 1
"""
_PUT_FENCED = """
if redis.call('GET', KEYS[3]) ~= ARGV[7] then return 0 end
""" + _PUT
_DELETE = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current or (ARGV[1] ~= '' and current ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
"""
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisStore(BindingStore):
    """Bindings in the Redis server at ``url`` (``redis://[:PASSWORD@]HOST:PORT/DB``).

    Args:
        url: the server; a password in it never appears in reprs or errors.
        prefix: prefix of every key this store writes, so several applications (or
            tests) can share one database.
    """

    def __init__(self, url: str, *, prefix: str = "psdk:manager:") -> None:
        self._url = url if isinstance(url, Secret) else Secret(url)
        self.prefix = prefix
        self._client: Redis | None = None

    def __repr__(self) -> str:
        return f"<RedisStore {_safe(self._url.reveal())!r} prefix={self.prefix!r}>"

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    @property
    def _owners(self) -> str:
        return f"{self.prefix}owners"

    @contextlib.asynccontextmanager
    async def _redis(self) -> AsyncIterator[Redis]:
        try:
            import redis.asyncio
            import redis.exceptions
        except ImportError as exc:
            raise ConfigError("RedisStore needs the redis package: "
                              + install_hint(CORE, extra="redis"), provider="") from exc
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(self._url.reveal(),
                                                        decode_responses=True)
        where = _safe(self._url.reveal())
        try:
            yield self._client
        except redis.exceptions.AuthenticationError as exc:
            raise AuthenticationError(f"binding store {where}: the server refused the "
                                      "credentials", provider="") from exc
        except redis.exceptions.RedisError as exc:
            raise Unavailable(f"binding store {where}: {type(exc).__name__}: "
                              f"{_safe(str(exc))}", provider="") from exc

    async def _script(self, script: str, keys: builtins.list[str], args: builtins.list[Any]
                      ) -> Any:
        async with self._redis() as client:
            return await client.eval(script, len(keys), *keys, *args)

    async def get(self, owner: str) -> Binding | None:
        return await self._get(check_owner(owner))

    async def _get(self, owner: str) -> Binding | None:
        async with self._redis() as client:
            raw = await client.hgetall(self._key("binding", owner))
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if not fields:
            return None
        return Binding.from_row(owner, fields["sandbox_id"], fields["provider"],
                                int(fields["version"]), fields["data"])

    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        check_owner(binding.owner)
        check_fence(fence)
        stored = attrs.evolve(binding, version=binding.version + 1)
        keys = [self._key("binding", binding.owner), self._owners]
        args = [str(binding.version), str(stored.version), binding.sandbox_id,
                binding.provider, binding.to_json(), binding.owner]
        if fence is None:
            done = await self._script(_PUT, keys, args)
        else:
            done = await self._script(_PUT_FENCED, [*keys, self._key("claim", fence[0])],
                                      [*args, fence[1]])
        return stored if int(done) else None

    async def delete(self, owner: str, *, version: int | None = None) -> bool:
        check_owner(owner)
        done = await self._script(_DELETE, [self._key("binding", owner), self._owners],
                                  ["" if version is None else str(version), owner])
        return bool(int(done))

    async def list(self) -> builtins.list[Binding]:
        async with self._redis() as client:
            owners = sorted(_text(o) for o in await client.smembers(self._owners))
        found = [await self._get(owner) for owner in owners]
        return [b for b in found if b is not None]

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        done = await self._script(_CLAIM, [self._key("claim", name)],
                                  [token, str(max(1, int(ttl * 1000)))])
        return bool(int(done))

    async def release(self, name: str, token: str) -> None:
        await self._script(_RELEASE, [self._key("claim", name)], [token])

    async def claimed(self, name: str) -> bool:
        async with self._redis() as client:
            return bool(await client.exists(self._key("claim", name)))

    async def time(self) -> float:
        async with self._redis() as client:
            seconds, micros = await client.time()
        return int(seconds) + int(micros) / 1e6

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
