#!/usr/bin/env bash
# run-tests.sh direct|pooled [PYTEST-ARGS...] — the Python client's pytest
# suite against a fresh database of the test cluster, directly or through
# PgBouncer in transaction mode; the schema is installed by the package
# itself (python -m skiplock init, through the mode's URL).  Runs under
# CTest and tests/harness/with-cluster (SKL_TEST_*).  Fails, never skips,
# when the toolchain (Debian's python3, python3-psycopg, python3-pytest)
# is missing.
# `run-tests.sh MODE faults` runs the fault tests (faults/) instead.
set -u
MODE=${1:?usage: run-tests.sh direct|pooled [PYTEST-ARGS...]}
shift
case $MODE in direct | pooled) ;; *) echo "run-tests.sh: mode is direct or pooled" >&2; exit 2 ;; esac
: "${SKL_TEST_PGPORT:?run under tests/harness/with-cluster}"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${SKL_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import psycopg, pytest' 2>/dev/null; then
	echo "run-tests.sh: $PY cannot import psycopg and pytest; install them with" \
		"scripts/bootstrap --test (python3-psycopg, python3-pytest)" >&2
	exit 1
fi
DB="py_${MODE}_$$"
base="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST"
DIRECT_URL="$base:$SKL_TEST_PGPORT/$DB"
URL=$DIRECT_URL
[ "$MODE" = pooled ] && URL="$base:$SKL_TEST_BOUNCER_PORT/$DB"
admin() { psql -X -q -At -v ON_ERROR_STOP=1 "$base:$SKL_TEST_PGPORT/postgres" -c "$1" >/dev/null; }
trap 'admin "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)"' EXIT
admin "CREATE DATABASE \"$DB\"" || exit 1
# the schema installer the package ships, made from the tree's steps
python3 "$HERE/../../scripts/install-sql" clients/python/src/skiplock/install.sql || exit 1
export PYTHONPATH="$HERE/src" PYTHONDONTWRITEBYTECODE=1
init_log=$("$PY" -m skiplock init --url "$URL" 2>&1) || { echo "run-tests.sh: $init_log" >&2; exit 1; }
cd "$HERE" || exit 1
SKIPLOCK_TEST_MODE=$MODE SKIPLOCK_TEST_URL=$URL SKIPLOCK_TEST_DIRECT_URL=$DIRECT_URL \
	"$PY" -m pytest -q "$@"
