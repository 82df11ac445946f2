"""Typed errors: transient or permanent by SQLSTATE, and fenced.

The table is the C library's (src/lib/core/error.c): class 08, 57P01-57P03,
40001, 40P01, 55P03 and 53300 are transient (a retry of the same call may
succeed); an error without a SQLSTATE (the connection broke before the
server answered) is transient too; everything else is permanent.
Classification is by SQLSTATE only, never by message text.
"""

from __future__ import annotations

from typing import Optional

import psycopg

TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01", "55P03", "53300"})
FENCED_SQLSTATE = "SK001"
# An idempotency key not in progress under the holder (idem_complete, idem_release).
NOT_HOLDER_SQLSTATE = "SK002"


def is_transient(sqlstate: Optional[str]) -> bool:
    """True when a retry of the call that failed with `sqlstate` may succeed."""
    if not sqlstate:
        return True
    return sqlstate.startswith("08") or sqlstate in TRANSIENT_SQLSTATES


class SkiplockError(Exception):
    """Base of every error this package raises; `sqlstate` may be None."""

    def __init__(self, message: str, sqlstate: Optional[str] = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class TransientError(SkiplockError):
    """The call may succeed if retried after a short backoff."""


class PermanentError(SkiplockError):
    """Retrying the same call will fail the same way."""


class FencedError(PermanentError):
    """The claim is no longer current: another owner has the job or the
    lease (SQLSTATE SK001 from job_fence or lease_fence, or a 'fenced_out'
    outcome), or the idempotency key is no longer in progress under this
    holder (SK002 from idem_complete or idem_release)."""

    def __init__(self, message: str, job_id: Optional[int] = None,
                 fencing: Optional[int] = None, sqlstate: str = FENCED_SQLSTATE):
        super().__init__(message, sqlstate)
        self.job_id = job_id
        self.fencing = fencing


class LeaseHeldError(SkiplockError):
    """The lease is live and held by another owner (or by this owner under
    another token): nothing was acquired.  `holder` is its owner and
    `expires_in` the seconds it has left, when they could be read."""

    def __init__(self, name: str, holder: Optional[str], expires_in: Optional[float]):
        who = f"by {holder} for another {expires_in:.1f} s" if holder is not None \
            and expires_in is not None else "by another owner"
        super().__init__(f"lease {name!r} is held {who}")
        self.name = name
        self.holder = holder
        self.expires_in = expires_in


class LeaseLostError(SkiplockError):
    """The lease ended while its body ran: a renewal matched no row (it
    expired and was taken, or was released), renewals kept failing until
    the lease could no longer be counted on, or the process was paused
    past that point.  Writes fenced with its token are refused from then
    on; anything unfenced the body did may overlap the next holder's."""

    def __init__(self, name: str, fencing: int, reason: str):
        super().__init__(f"lease {name!r} (token {fencing}) was lost: {reason}")
        self.name = name
        self.fencing = fencing
        self.reason = reason


def classify(exc: BaseException) -> SkiplockError:
    """The typed error for a psycopg error (or any other exception)."""
    if isinstance(exc, SkiplockError):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    message = _message(exc, sqlstate)
    if sqlstate in (FENCED_SQLSTATE, NOT_HOLDER_SQLSTATE):
        err: SkiplockError = FencedError(message, sqlstate=sqlstate)
    elif isinstance(exc, psycopg.InterfaceError) and not sqlstate:
        err = PermanentError(message)  # misuse: a closed connection, a bad argument
    elif isinstance(exc, psycopg.Error) and is_transient(sqlstate):
        err = TransientError(message, sqlstate)
    else:
        err = PermanentError(message, sqlstate)
    err.__cause__ = exc
    return err


def _message(exc: BaseException, sqlstate: Optional[str]) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return f"{first} (SQLSTATE {sqlstate})" if sqlstate else first


# The oldest schema step this package works with: the outcomes as one
# JSON array of records (step 0033, protocol 3); limits (0029), cron_tick
# (0024), schedules_declare (0025), job_complete (0019) and the
# heartbeat's held rows (0020) before them.
MIN_SCHEMA = 33
NO_SCHEMA_SQLSTATES = ("3F000", "42883")  # no schema skiplock; no installed_version()
INSTALL_HINT = "skiplock.init(url) or `python -m skiplock init --url URL`"


def schema_error(version: Optional[int], sqlstate: Optional[str] = None) -> PermanentError:
    """The error for a database whose skiplock schema is missing (version
    None) or older than MIN_SCHEMA."""
    if version is None:
        return PermanentError(f"the database has no skiplock schema: install it with "
                              f"{INSTALL_HINT} (this client needs step {MIN_SCHEMA} or later)",
                              sqlstate)
    return PermanentError(f"the skiplock schema is at step {version}; this client needs step "
                          f"{MIN_SCHEMA} or later: upgrade it with {INSTALL_HINT}")
