"""Is a connection direct or through a pooler?  The C worker's rule.

A URL is pooled when a host's first DNS label ends in "-pooler" (Neon) or
its port is 6432 or 6543 (PgBouncer, Supavisor), or a Supabase pooler host
(.pooler.supabase.com).  Otherwise, with
pooler="auto", a live connection is direct only when the port the server
reports (inet_server_port()) is the port we dialled, or the server is on a
Unix socket: PgBouncer on an unusual port, or a port mapping, then counts
as pooled, which is safe (we only poll).  pooler="none" says direct
without asking; "transaction" or "session" says pooled.

Only a connection known to be direct LISTENs (a LISTEN through a
transaction pooler lands on whichever server connection it picked) or
gets server-side prepared statements.
"""

from __future__ import annotations

from typing import Any, Optional

from psycopg.conninfo import conninfo_to_dict

POOLER_MODES = ("auto", "none", "session", "transaction")


def check_mode(mode: str) -> str:
    if mode not in POOLER_MODES:
        raise ValueError(f"unknown pooler mode {mode!r} (expected auto, none, session or "
                         "transaction)")
    return mode


def _first_label(host: str) -> str:
    for sep in ".:":
        host = host.split(sep, 1)[0]
    return host


def url_looks_pooled(url: str) -> bool:
    """The URL names a known pooler (host or port); no network."""
    opts = conninfo_to_dict(url)
    hosts = [h for h in str(opts.get("host") or "").split(",") if h]
    ports = [p for p in str(opts.get("port") or "").split(",") if p]
    if any(len(_first_label(h)) > 7 and _first_label(h).endswith("-pooler") for h in hosts):
        return True
    if "6432" in ports or "6543" in ports:
        return True
    # Supavisor: session mode on 5432, transaction mode otherwise; both pooled.
    return any(h.endswith(".pooler.supabase.com") for h in hosts)


def server_port_matches(server_port: Optional[int], dialled_port: Any) -> bool:
    """inet_server_port() against the port libpq dialled: equal, or the
    server is on a Unix socket (NULL), means no pooler in between."""
    if server_port is None:
        return True
    return bool(dialled_port) and str(server_port) == str(dialled_port)


async def is_direct(conn: Any, url: str, mode: str) -> bool:
    """Decide for a live psycopg AsyncConnection (autocommit)."""
    if mode == "none":
        return True
    if mode != "auto" or url_looks_pooled(url):
        return False
    cur = await conn.execute("SELECT inet_server_port()")
    row = await cur.fetchone()
    return server_port_matches(row[0], conn.info.port)
