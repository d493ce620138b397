"""``PostgresStore``: bindings in PostgreSQL, for several application replicas.

Needs the ``postgres`` extra (``pip install 'sandbox-provider-sdk[postgres]'``, psycopg 3); the
driver is imported when the store is made, which checks the DSN, and it runs on the asyncio
backend.
Compare-and-set is one ``UPDATE ... WHERE version = %s`` (or ``INSERT ... ON CONFLICT DO
NOTHING`` for a first binding); a claim is an ``INSERT ... ON CONFLICT DO UPDATE ...
WHERE expires_at < now()``, so the row lock makes exactly one of several callers win. A
fenced write locks the claim's row (``SELECT ... FOR UPDATE``) in the transaction that
writes the binding. Claims expire by the server's clock (``now()``), which is also what
:meth:`PostgresStore.time` reads. The tables are created on first use, under an
advisory lock. A call cancelled while the server holds it (a lock, a slow query) is
cancelled on the server and its connection closed; the next call opens another.

``open_store("postgresql://...?table=app_bindings")`` names the table in the URL.
"""

from __future__ import annotations

import builtins
import contextlib
import re
from collections.abc import AsyncIterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio

from provider_sdk.config import Secret
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import AuthenticationError, ConfigError, InvalidInput, Unavailable
from provider_sdk.manager._claims import check_fence, check_owner
from provider_sdk.manager.store import Binding, BindingStore, _safe

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresStore"]

_TABLE = re.compile(r"\A[a-z_][a-z0-9_]{0,50}\Z")


class PostgresStore(BindingStore):
    """Bindings in the PostgreSQL database at ``dsn`` (``postgresql://USER:PASS@HOST/DB``).

    Args:
        dsn: the database; a password in it never appears in reprs or errors.
        table: name of the bindings table; claims go in ``{table}_claims``. Lowercase
            letters, digits and ``_``.
    """

    def __init__(self, dsn: str, *, table: str = "psdk_bindings") -> None:
        if not _TABLE.match(table):
            raise InvalidInput(f"table: {table!r} must be lowercase letters, digits and '_'")
        _check_dsn(str(dsn.reveal() if isinstance(dsn, Secret) else dsn))
        self._dsn = dsn if isinstance(dsn, Secret) else Secret(dsn)
        self.table = table
        self._conn: AsyncConnection[Any] | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<PostgresStore {_where(self._dsn.reveal())!r} table={self.table!r}>"

    @contextlib.asynccontextmanager
    async def _db(self) -> AsyncIterator[AsyncConnection[Any]]:
        """The connection, used by one call at a time; errors become neutral ones."""
        psycopg = _driver()
        where = _where(self._dsn.reveal())
        async with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self._dsn.reveal(), autocommit=True)
                    await self._create_tables(self._conn)
                yield self._conn
            except psycopg.OperationalError as exc:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()
                if "password authentication failed" in str(exc):
                    raise AuthenticationError(f"binding store {where}: the server refused "
                                              "the credentials", provider="") from exc
                raise Unavailable(f"binding store {where}: {_safe(str(exc))}",
                                  provider="") from exc
            except psycopg.Error as exc:
                raise Unavailable(f"binding store {where}: {type(exc).__name__}: "
                                  f"{_safe(str(exc))}", provider="") from exc

    async def _create_tables(self, conn: AsyncConnection[Any]) -> None:
        sql = _driver().sql
        async with conn.transaction():
            # Two processes creating the same table at once would collide on the catalog.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            await conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (owner text PRIMARY KEY, sandbox_id text NOT "
                "NULL, provider text NOT NULL, version bigint NOT NULL, data text NOT NULL)"
            ).format(sql.Identifier(self.table)))
            await conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, token text NOT NULL, "
                "expires_at timestamptz NOT NULL)"
            ).format(sql.Identifier(f"{self.table}_claims")))

    def _sql(self, query: str) -> Any:
        """``query`` with ``{b}`` (the bindings table) and ``{c}`` (the claims table)."""
        sql = _driver().sql
        return sql.SQL(query).format(b=sql.Identifier(self.table),
                                     c=sql.Identifier(f"{self.table}_claims"))

    async def _query(self, query: str, params: tuple[Any, ...] = ()
                     ) -> builtins.list[tuple[Any, ...]]:
        """Run ``query`` (see :meth:`_sql`)."""
        async with self._db() as conn:
            cur = await conn.execute(self._sql(query), params)
            return await cur.fetchall() if cur.description else []

    async def _fenced(self, fence: tuple[str, str], query: str, params: tuple[Any, ...]
                      ) -> builtins.list[tuple[Any, ...]]:
        """Run ``query`` in a transaction that first locks the claim ``fence`` names,
        and only if ``fence``'s token holds it; no rows otherwise."""
        async with self._db() as conn, conn.transaction():
            cur = await conn.execute(self._sql(
                "SELECT 1 FROM {c} WHERE name = %s AND token = %s AND expires_at > now() "
                "FOR UPDATE"), fence)
            if not await cur.fetchall():
                return []
            cur = await conn.execute(self._sql(query), params)
            return await cur.fetchall()

    async def get(self, owner: str) -> Binding | None:
        rows = await self._query("SELECT owner, sandbox_id, provider, version, data FROM {b} "
                                 "WHERE owner = %s", (check_owner(owner),))
        return Binding.from_row(*rows[0]) if rows else None

    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        check_owner(binding.owner)
        check_fence(fence)
        args = (binding.sandbox_id, binding.provider, binding.to_json())
        if binding.version == 0:
            query = ("INSERT INTO {b} (sandbox_id, provider, data, owner, version) "
                     "VALUES (%s, %s, %s, %s, 1) ON CONFLICT (owner) DO NOTHING RETURNING "
                     "version")
            params: tuple[Any, ...] = (*args, binding.owner)
        else:
            query = ("UPDATE {b} SET sandbox_id = %s, provider = %s, data = %s, "
                     "version = version + 1 WHERE owner = %s AND version = %s RETURNING "
                     "version")
            params = (*args, binding.owner, binding.version)
        rows = await (self._query(query, params) if fence is None
                      else self._fenced(fence, query, params))
        if not rows:
            return None
        return Binding.from_row(binding.owner, binding.sandbox_id, binding.provider,
                                rows[0][0], binding.to_json())

    async def delete(self, owner: str, *, version: int | None = None) -> bool:
        check_owner(owner)
        if version is None:
            rows = await self._query("DELETE FROM {b} WHERE owner = %s RETURNING owner",
                                     (owner,))
        else:
            rows = await self._query("DELETE FROM {b} WHERE owner = %s AND version = %s "
                                     "RETURNING owner", (owner, version))
        return bool(rows)

    async def list(self) -> builtins.list[Binding]:
        rows = await self._query("SELECT owner, sandbox_id, provider, version, data FROM {b} "
                                 "ORDER BY owner")
        return [Binding.from_row(*row) for row in rows]

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        rows = await self._query(
            "INSERT INTO {c} AS c (name, token, expires_at) "
            "VALUES (%s, %s, now() + make_interval(secs => %s)) "
            "ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, "
            "expires_at = EXCLUDED.expires_at "
            "WHERE c.expires_at < now() OR c.token = EXCLUDED.token RETURNING token",
            (name, token, ttl))
        return bool(rows)

    async def release(self, name: str, token: str) -> None:
        await self._query("DELETE FROM {c} WHERE name = %s AND token = %s", (name, token))

    async def claimed(self, name: str) -> bool:
        rows = await self._query("SELECT 1 FROM {c} WHERE name = %s AND expires_at > now()",
                                 (name,))
        return bool(rows)

    async def time(self) -> float:
        rows = await self._query("SELECT extract(epoch FROM clock_timestamp())::float8")
        return float(rows[0][0])

    async def aclose(self) -> None:
        async with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                await conn.close()


def _check_dsn(dsn: str) -> None:
    """Refuse, as the store is made, a DSN that libpq cannot read: a mistake shows at
    construction, not at the first call. Of a DSN that is not a URL nothing is quoted (a
    ``key=value`` string may hold a password)."""
    psycopg = _driver()
    url = dsn.startswith(("postgresql://", "postgres://"))
    reason = ""
    try:
        port = psycopg.conninfo.conninfo_to_dict(dsn).get("port")
    except psycopg.ProgrammingError as exc:
        scheme, sep, _ = dsn.partition("://")
        reason = _safe(str(exc).strip().splitlines()[0]) if url else \
            f"its scheme is {scheme!r}" if sep and "=" not in scheme else "it cannot be read"
    else:
        if port and not all(p.strip().isdigit() for p in str(port).split(",")):
            reason = f"port {str(port)!r} is not a number"
    if reason:
        what = repr(_safe(dsn)) if url else "the DSN"
        raise InvalidInput(f"PostgresStore: {what} is not a PostgreSQL connection string "
                           f"(postgresql://USER:PASS@HOST/DB, or key=value pairs): {reason}",
                           provider="")


def _where(dsn: str) -> str:
    """How errors and reprs name the database: a URL without its user information, else
    the DSN's settings without the password (a ``key=value`` string, or a URL's query,
    may hold one)."""
    if dsn.startswith(("postgresql://", "postgres://")) and "?" not in dsn:
        return _safe(dsn)
    settings = _driver().conninfo.conninfo_to_dict(dsn)
    return " ".join(f"{k}={v}" for k, v in settings.items() if k != "password")


def _driver() -> ModuleType:
    """psycopg, imported on first use: the core does not need it."""
    try:
        import psycopg
        import psycopg.conninfo
        import psycopg.sql
    except ImportError as exc:
        raise ConfigError("PostgresStore needs psycopg: "
                          + install_hint(CORE, extra="postgres"), provider="") from exc
    return psycopg
