"""The SQLSTATE of a failed connection attempt.

psycopg reports a failed connection with libpq's message alone, without
the server's SQLSTATE (28P01 a wrong password, 3D000 a missing database,
53300 too many connections, 57P03 a server starting up), and the message
is in the server's language.  libpq writes the SQLSTATE into the message
only in verbose mode, which must be set before the attempt reads the
server's answer, and psycopg has no call for that.  So after a failed
connection the worker makes one more attempt of its own with the
system's libpq (the one psycopg runs on) through ctypes: start, verbose,
poll to the end, read the SQLSTATE, as the C library does
(src/lib/core/client.c).  Only ever called after a failure.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import select
import time
from typing import Any, List, Optional

_FAILED, _READING, _WRITING, _OK = 0, 1, 2, 3  # PostgresPollingStatusType
_VERBOSE = 2  # PQERRORS_VERBOSE
_STATE = re.compile(r":  ([0-9A-Z]{5}): ")
_lib: Any = None


def _libpq() -> Any:
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("pq")
        if name is None:
            raise OSError("libpq not found")
        lib = ctypes.CDLL(name)
        lib.PQconnectStart.restype = ctypes.c_void_p
        lib.PQconnectStart.argtypes = [ctypes.c_char_p]
        for fn in ("PQconnectPoll", "PQsocket", "PQsetErrorVerbosity"):
            getattr(lib, fn).restype = ctypes.c_int
        lib.PQconnectPoll.argtypes = lib.PQsocket.argtypes = [ctypes.c_void_p]
        lib.PQsetErrorVerbosity.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.PQerrorMessage.restype = ctypes.c_char_p
        lib.PQerrorMessage.argtypes = lib.PQfinish.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def connect_sqlstate(conninfo: str, timeout: float = 5.0) -> Optional[str]:
    """The SQLSTATE the server sent when it refused a connection to
    `conninfo` (a URL or key=value string), or None: it connected, it
    could not be reached, no SQLSTATE came, or libpq is not loadable."""
    try:
        lib = _libpq()
    except OSError:
        return None
    conn = lib.PQconnectStart(conninfo.encode())
    if not conn:
        return None
    try:
        lib.PQsetErrorVerbosity(conn, _VERBOSE)
        deadline = time.monotonic() + timeout
        status = _WRITING
        while status in (_READING, _WRITING) and time.monotonic() < deadline:
            sock = lib.PQsocket(conn)
            if sock < 0:
                break
            reading: List[int] = [sock] if status == _READING else []
            writing: List[int] = [] if status == _READING else [sock]
            select.select(reading, writing, [], max(0.0, deadline - time.monotonic()))
            status = lib.PQconnectPoll(conn)
        if status != _FAILED:
            return None
        found = _STATE.search((lib.PQerrorMessage(conn) or b"").decode("utf-8", "replace"))
        return found.group(1) if found else None
    finally:
        lib.PQfinish(conn)
