"""Array parameters as one text literal each ('{1,2,3}'), cast in the SQL.

psycopg's pure-Python build dumps a list element by element; the worker
sends one array per column of a batch of outcomes every round trip, so it
writes the array literal itself: one str per array, parsed by the server's
array input.  Elements are quoted as PostgreSQL's array input reads them
(docs: "Array Value Input"): in double quotes, with \\ and " escaped.
"""

from __future__ import annotations

from typing import Iterable, Optional


def int_array(values: Iterable[Optional[int]]) -> str:
    """'{1,NULL,3}' for bigint[] or int[]."""
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


def quote(text: str) -> str:
    """One element of an array literal, quoted."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[Optional[str]]) -> str:
    """'{"a",NULL}' for text[] or jsonb[] (each element its text)."""
    return "{" + ",".join("NULL" if v is None else quote(v) for v in values) + "}"
