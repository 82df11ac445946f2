#!/usr/bin/env bash
# Conformance adapter: the Python client's example worker
# (clients/python/examples/conformance_worker.py) on Debian's python3 and
# python3-psycopg.  See ../README.md.
set -eu
: "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
root=$(cd "$(dirname "$0")/../../.." && pwd)
py=${SKL_PYTHON:-/usr/bin/python3}
"$py" -c 'import psycopg' 2>/dev/null || {
	echo "python.sh: $py cannot import psycopg; install python3-psycopg (scripts/bootstrap --test)" >&2
	exit 1
}
export PYTHONPATH="$root/clients/python/src" PYTHONDONTWRITEBYTECODE=1
exec "$py" "$root/clients/python/examples/conformance_worker.py"
