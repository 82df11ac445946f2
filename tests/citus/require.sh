#!/usr/bin/env bash
# require.sh CMD [ARGS...] — runs CMD (a test of the citus label) on a Citus
# cluster only: under tests/harness/with-cluster --citus (make test-citus)
# it execs CMD; elsewhere it exits 77, which CTest counts as skipped.
[ "${SKL_TEST_CITUS:-}" = 1 ] || {
	echo "not a Citus cluster (run with make test-citus or with-cluster --citus): skipped"
	exit 77
}
exec "$@"
