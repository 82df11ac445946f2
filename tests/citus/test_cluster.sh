#!/usr/bin/env bash
# The Citus cluster of make test-citus is real: the coordinator, reached
# directly or through PgBouncer, knows two active workers; a table the test
# distributes has its shards on both workers, with the rows physically
# there; and skiplock init and a job's round trip work in the same
# database.  Runs under tests/harness/with-cluster --citus (tests/README.md).
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/../cli/lib.sh"
: "${SKL_TEST_CITUS_WORKER_PORTS:?run under tests/harness/with-cluster --citus}"
# qu SQL: through the test's URL (PgBouncer in pooled mode).
qu() { psql -X -q -At -v ON_ERROR_STOP=1 "$URL" -c "$1"; }
# on_worker PORT SQL: directly on a worker, in the test's database.
on_worker() { psql -X -q -At -v ON_ERROR_STOP=1 "postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$1/$DB" -c "$2"; }
ROWS=1000

check_eq "the URL reaches the coordinator" "$(qu "SELECT citus_is_coordinator()")" t
check_eq "two active workers" "$(qu "SELECT count(*) FROM citus_get_active_worker_nodes()")" 2
want=$(tr ' ' '\n' <<<"$SKL_TEST_CITUS_WORKER_PORTS" | sort -n | paste -sd' ')
check_eq "the active workers are the harness's" \
	"$(qu "SELECT string_agg(node_port::text, ' ' ORDER BY node_port) FROM citus_get_active_worker_nodes()")" "$want"

qu "CREATE TABLE scratch (id bigint PRIMARY KEY, v text)" && pass "scratch table created" || fail "create table"
check_eq "create_distributed_table" "$(qu "SELECT create_distributed_table('scratch', 'id')")" ""
qu "INSERT INTO scratch SELECT i, 'v' || i FROM generate_series(1, $ROWS) i" || fail "insert"
check_eq "the rows read back through the coordinator" "$(qu "SELECT count(*) FROM scratch")" "$ROWS"
check_eq "shards: citus.shard_count of them" \
	"$(qu "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'scratch'::regclass")" "$SKL_TEST_CITUS_SHARD_COUNT"
check_eq "shards on both workers" \
	"$(qu "SELECT string_agg(p::text, ' ' ORDER BY p) FROM (SELECT DISTINCT nodeport p FROM citus_shards WHERE table_name = 'scratch'::regclass) s")" \
	"$want"
# Each worker, asked directly, holds its shards' rows; together all of them.
total=0
for port in $SKL_TEST_CITUS_WORKER_PORTS; do
	n=0
	for shard in $(q "SELECT shard_name FROM citus_shards WHERE table_name = 'scratch'::regclass AND nodeport = $port"); do
		n=$((n + $(on_worker "$port" "SELECT count(*) FROM $shard")))
	done
	[ "$n" -gt 0 ] && pass "worker $port holds $n of the rows" || fail "worker $port holds no rows"
	total=$((total + n))
done
check_eq "the workers hold every row once" "$total" "$ROWS"

"$SKL_BIN" init --url "$URL" >"$TMP/init.log" 2>&1 && pass "skiplock init" || fail "skiplock init: $(cat "$TMP/init.log")"
id=$("$SKL_BIN" enqueue --url "$URL" citus.ping '{}' 2>"$TMP/enqueue.log") && pass "enqueue" ||
	fail "enqueue: $(cat "$TMP/enqueue.log")"
echo "skiplock's tables distributed by Citus: $(q "SELECT count(*) FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'skiplock'")"
check_eq "the job is there" "$(qu "SELECT kind FROM skiplock.all_jobs WHERE id = ${id:-0}")" citus.ping
# init --distributed over the same database, the job in it: skiplock's
# tables are then distributed by queue (tests/citus/test_distributed.sh
# runs the live path on them).
"$SKL_BIN" init --url "$URL" --distributed >"$TMP/init2.log" 2>&1 && pass "skiplock init --distributed" ||
	fail "skiplock init --distributed: $(cat "$TMP/init2.log")"
check_eq "jobs and finished_jobs are distributed by queue, colocated" \
	"$(q "SELECT count(DISTINCT p.colocationid) || ' ' || string_agg(c.relname || ':' || column_to_column_name(p.logicalrelid, p.partkey), ' ' ORDER BY c.relname) FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid WHERE p.logicalrelid IN ('skiplock.jobs'::regclass, 'skiplock.finished_jobs'::regclass)")" \
	"1 finished_jobs:queue jobs:queue"
check_eq "the job was moved into its shard" "$(qu "SELECT kind FROM skiplock.jobs WHERE id = ${id:-0}")" citus.ping
no_leftovers
finish
