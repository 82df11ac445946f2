"""The schema, installed from the package: install.sql, the copy of the
tree's sql/install.sql (scripts/install-sql) shipped as package data.

It does what `skiplock init` does: refuses a database whose installed
steps came from another text (SQLSTATE 55000, naming the step: a
PermanentError here), then applies each missing step in its own
transaction under a transaction-scoped advisory lock, so any number of
installers may run at once, direct or through a transaction-mode pooler.
It is sent whole as one simple-protocol query: no parameters, never
prepared, on an autocommit connection (its own BEGIN and COMMIT).
"""

from __future__ import annotations

import contextlib
import functools
from importlib import resources
from typing import Any, Dict, Optional, Union

import psycopg
from psycopg.pq import TransactionStatus

from .errors import classify

VERSION_SQL = "SELECT skiplock.installed_version()"


@functools.lru_cache(maxsize=None)
def install_sql() -> str:
    """The installer script shipped with this package."""
    return resources.files(__package__).joinpath("install.sql").read_text("utf-8")


def _check_idle(conn: Any) -> None:
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError("init needs a connection outside a transaction (the script commits "
                         "each step itself)")


def _usable(conn: Any) -> bool:
    return not conn.closed and not conn.broken


def _version(row: Optional[Any]) -> int:
    assert row is not None
    return int(row[0])


def init_sync(target: Union[str, "psycopg.Connection[Any]"],
              connect_kwargs: Optional[Dict[str, Any]] = None) -> int:
    """Installs or upgrades the skiplock schema; the installed step after.

    `target` is a conninfo (connected and closed here; `connect_kwargs` for
    psycopg) or a psycopg Connection outside a transaction (autocommit for
    the call, then as it was).  Raises PermanentError for the drift refusal
    (SQLSTATE 55000, naming the step) or any other refusal, TransientError
    when the connection fails."""
    if isinstance(target, str):
        try:
            with psycopg.connect(target, autocommit=True, prepare_threshold=None,
                                 **(connect_kwargs or {})) as conn:
                return init_sync(conn)
        except psycopg.Error as e:
            raise classify(e) from e
    if not isinstance(target, psycopg.Connection):
        raise TypeError("init_sync takes a conninfo str or a psycopg Connection, not "
                        f"{type(target).__name__} (await skiplock.init() for an AsyncConnection)")
    _check_idle(target)
    autocommit = target.autocommit
    try:
        target.autocommit = True
        target.execute(install_sql(), prepare=False)
        return _version(target.execute(VERSION_SQL, prepare=False).fetchone())
    except psycopg.Error as e:
        if _usable(target) and target.info.transaction_status == TransactionStatus.INERROR:
            with contextlib.suppress(psycopg.Error):
                target.execute("ROLLBACK")  # the failed step's transaction
        raise classify(e) from e
    finally:
        if _usable(target) and target.autocommit != autocommit:
            target.autocommit = autocommit


async def init(target: Union[str, "psycopg.AsyncConnection[Any]"],
               connect_kwargs: Optional[Dict[str, Any]] = None) -> int:
    """init_sync() for asyncio: a conninfo, or a psycopg AsyncConnection
    outside a transaction."""
    if isinstance(target, str):
        try:
            async with await psycopg.AsyncConnection.connect(
                    target, autocommit=True, prepare_threshold=None,
                    **(connect_kwargs or {})) as conn:
                return await init(conn)
        except psycopg.Error as e:
            raise classify(e) from e
    if not isinstance(target, psycopg.AsyncConnection):
        raise TypeError("init takes a conninfo str or a psycopg AsyncConnection, not "
                        f"{type(target).__name__} (skiplock.init_sync() for a Connection)")
    _check_idle(target)
    autocommit = target.autocommit
    try:
        await target.set_autocommit(True)
        await target.execute(install_sql(), prepare=False)
        return _version(await (await target.execute(VERSION_SQL, prepare=False)).fetchone())
    except psycopg.Error as e:
        if _usable(target) and target.info.transaction_status == TransactionStatus.INERROR:
            with contextlib.suppress(psycopg.Error):
                await target.execute("ROLLBACK")
        raise classify(e) from e
    finally:
        if _usable(target) and target.autocommit != autocommit:
            await target.set_autocommit(autocommit)
