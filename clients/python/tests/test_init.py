"""The schema installed by the package itself (skiplock.init, init_sync and
`python -m skiplock init`, from its copy of sql/install.sql) through the
mode's URL: three installers at once on an empty database, run again,
a drifted step refused; the command's usage and errors."""

import asyncio
import os
import re
import subprocess
import sys

import psycopg
import pytest

import skiplock
from skiplock._install import install_sql
from conftest import URL, idle_in_transaction

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src"))
ENV.pop("DATABASE_URL", None)
# The steps the shipped script installs: (version, name, checksum).
STEPS = [(int(v), n, c) for v, n, c in
         re.findall(r"^ *\((\d+), '(\d{4}_\w+)', '([0-9a-f]{64})'\)", install_sql(), re.M)]
NEWEST = max(v for v, _, _ in STEPS)


def cli(*args, **env):
    """python -m skiplock ARGS: (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "skiplock", *args], env={**ENV, **env},
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


async def cli_async(*args):
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "skiplock", *args, env=ENV,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await p.communicate()
    return p.returncode, out.decode(), err.decode()


def installed(direct):
    """(the step rows, the newest applied_at, installed_version())."""
    with psycopg.connect(direct) as c:
        rows = c.execute("SELECT version, name, checksum FROM skiplock.schema_version "
                         "ORDER BY version").fetchall()
        last, version = c.execute("SELECT max(applied_at), skiplock.installed_version() "
                                  "FROM skiplock.schema_version").fetchone()
        return rows, last, version


def test_three_installers_at_once_then_again_then_a_drifted_step(scratch):
    url, direct = scratch
    tree = sorted(f[:-4] for f in os.listdir(os.path.join(HERE, "..", "..", "..", "sql"))
                  if re.fullmatch(r"\d{4}_\w+\.sql", f))
    assert [name for _, name, _ in STEPS] == tree, "the package's script has every step"
    assert NEWEST >= skiplock.MIN_SCHEMA

    async def three():
        return await asyncio.gather(skiplock.init(url), asyncio.to_thread(skiplock.init_sync, url),
                                    cli_async("init", "--url", url))
    results = asyncio.run(three())
    assert results == [NEWEST, NEWEST, (0, f"skiplock init: the schema is at step {NEWEST}\n",
                                        "")]
    rows, last, version = installed(direct)
    assert rows == STEPS, "one row per step, each with the script's checksum"
    assert version == NEWEST

    with psycopg.connect(url, prepare_threshold=None) as conn:  # not autocommit
        assert skiplock.init_sync(conn) == NEWEST
        assert conn.autocommit is False, "as it was"
    assert installed(direct) == (rows, last, version), "run again: nothing applied"

    with psycopg.connect(direct, autocommit=True) as c:
        c.execute("UPDATE skiplock.schema_version SET checksum = repeat('0', 64) "
                  "WHERE version = 3")
        c.execute("DELETE FROM skiplock.schema_version WHERE version = %s", [NEWEST])
        n = c.execute("SELECT count(*) FROM skiplock.schema_version").fetchone()[0]
        why = ("schema step 0003_leases is installed from a text this installer does not know "
               "(checksum 000000000000, built in ")
        with psycopg.connect(url, autocommit=True) as conn:
            with pytest.raises(skiplock.PermanentError) as err:
                skiplock.init_sync(conn)
            assert err.value.sqlstate == "55000" and str(err.value).startswith(why)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert conn.execute("SELECT 1").fetchone() == (1,), "the connection is usable"
        with pytest.raises(skiplock.PermanentError, match=re.escape(why)):
            asyncio.run(skiplock.init(url))
        status, out, stderr = cli("init", "--url", url)
        assert (status, out) == (1, "") and stderr.startswith(f"skiplock init: {why}")
        assert stderr.endswith("(SQLSTATE 55000)\n") and stderr.count("\n") == 1, stderr
        assert c.execute("SELECT count(*) FROM skiplock.schema_version").fetchone()[0] == n, \
            "nothing applied after the drifted step"
        assert idle_in_transaction(c) == 0


def test_the_command(db):
    status, out, err = cli("--help")
    assert status == 0 and "init" in out and err == ""
    status, out, err = cli("init", "--help")
    assert status == 0 and "--url URL" in out and "DATABASE_URL" in out
    for args, says in [((), "the following arguments are required: COMMAND"),
                       (("init",), "init: no database: pass --url URL or set DATABASE_URL"),
                       (("init", "--bogus"), "unrecognized arguments: --bogus"),
                       (("drop",), "invalid choice: 'drop'")]:
        status, out, err = cli(*args)
        assert (status, out) == (2, ""), args
        assert err.count("\n") == 1 and says in err, err
    status, out, err = cli("init", DATABASE_URL=URL)
    assert (status, out, err) == (0, f"skiplock init: the schema is at step {NEWEST}\n", "")
    status, out, err = cli("init", "--url", "postgresql://nobody@127.0.0.1:1/x?connect_timeout=2")
    assert status == 1 and out == "" and err.startswith("skiplock init: ") and \
        err.count("\n") == 1, err


def test_bad_arguments(app_conn):
    with pytest.raises(TypeError, match="init_sync takes a conninfo str or a psycopg Connection"):
        skiplock.init_sync(None)

    async def on_sync_conn():
        await skiplock.init(app_conn)
    with pytest.raises(TypeError, match="skiplock.init_sync"):
        asyncio.run(on_sync_conn())
    app_conn.execute("SELECT 1")  # a transaction open
    with pytest.raises(ValueError, match="outside a transaction"):
        skiplock.init_sync(app_conn)
    app_conn.rollback()
