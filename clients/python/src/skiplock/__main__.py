"""python -m skiplock init [--url URL]: installs or upgrades the skiplock
schema from this package (skiplock.init_sync), as `skiplock init` does.

The URL comes from --url, else $DATABASE_URL.  Prints the installed step;
exits 2 for bad usage, 1 when the schema could not be installed (one line
on stderr: the error, with its SQLSTATE when the database gave one).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, NoReturn, Optional

from ._install import init_sync
from .errors import SkiplockError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad usage: one line on stderr, exit 2."""
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m skiplock",
        description="skiplock's schema, installed from the Python package.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    init = sub.add_parser(
        "init", help="install or upgrade the skiplock schema",
        description="Installs or upgrades the skiplock schema, each missing step in its own "
                    "transaction; safe to run again and beside other installers, directly or "
                    "through a transaction-mode pooler.")
    init.add_argument("--url", help="the database (default: $DATABASE_URL)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    url = args.url or os.environ.get("DATABASE_URL")
    if not url:
        p.error("init: no database: pass --url URL or set DATABASE_URL")
    try:
        version = init_sync(url)
    except SkiplockError as e:
        print(f"skiplock init: {e}", file=sys.stderr)
        return 1
    print(f"skiplock init: the schema is at step {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
