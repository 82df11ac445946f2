#!/usr/bin/env bash
# examples/: enqueue from Node (pg from npm) and from psql inside an
# application transaction — committed: the order and its job; rolled back:
# neither — and a worker whose handlers are a Node and a shell script.
# Node parts are skipped, with a message, only when node or npm is absent.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
EX=$SKL_SOURCE_DIR/examples
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
q "CREATE TABLE orders (id bigint PRIMARY KEY, total_cents int NOT NULL)"
export DATABASE_URL=$URL
jobs_of() { q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'email' AND payload->>'order' = '$1'"; }
orders_of() { q "SELECT count(*) FROM orders WHERE id = $1"; }

# --- psql ---
out=$("$EX/psql/enqueue.sh" 101 2>&1)
check_eq "psql: committed order prints its job" "$(sed 's/[0-9]*$/N/' <<<"$out")" "email job N"
check_eq "psql: order and job both exist" "$(orders_of 101) $(jobs_of 101)" "1 1"
check_eq "psql: the job is in queue mail" "$(q "SELECT queue || ' ' || (payload->>'template') FROM skiplock.all_jobs WHERE payload->>'order' = '101'")" "mail confirmation"
"$EX/psql/enqueue.sh" 102 --fail >/dev/null 2>"$TMP/psql.err"
check_eq "psql: failed transaction exits non-zero" "$?" 3
check_eq "psql: rolled back: no order, no job" "$(orders_of 102) $(jobs_of 102)" "0 0"

# --- Node ---
NODE_DIR=$SKL_BUILD_DIR/examples-node
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "SKIP Node examples: node or npm is not installed (apt-get install nodejs npm)"
else
	# npm install once per build dir, shared by both modes
	(
		flock 9
		if [ ! -d "$NODE_DIR/node_modules/pg" ]; then
			mkdir -p "$NODE_DIR" && cp "$EX/node/package.json" "$NODE_DIR/" &&
				npm install --prefix "$NODE_DIR" --no-audit --no-fund --silent >"$NODE_DIR/npm.log" 2>&1
		fi
	) 9>"$SKL_BUILD_DIR/.npm-install.lock"
	if [ -d "$NODE_DIR/node_modules/pg" ]; then
		export NODE_PATH=$NODE_DIR/node_modules
		out=$(node "$EX/node/enqueue.js" 201 2>&1)
		check_eq "node: committed order prints its job" "$(sed 's/[0-9]*$/N/' <<<"$out")" "order 201: email job N"
		check_eq "node: order and job both exist" "$(orders_of 201) $(jobs_of 201)" "1 1"
		out=$(node "$EX/node/enqueue.js" 202 --fail 2>&1)
		check_eq "node: failed transaction exits 1" "$? $out" "1 order 202: rolled back: payment declined"
		check_eq "node: rolled back: no order, no job" "$(orders_of 202) $(jobs_of 202)" "0 0"
		out=$(node "$EX/node/enqueue.js" 201 2>&1)
		check_eq "node: a duplicate order fails and enqueues nothing more" "$(jobs_of 201)" 1
	else
		fail "npm install pg failed: $(tail -5 "$NODE_DIR/npm.log")"
	fi
fi

# --- a worker with handlers in Node and shell ---
mkdir -p "$TMP/archive"
ids=()
ids+=("$("$S" enqueue --url "$URL" archive '{"doc": "a"}')")
ids+=("$("$S" enqueue --url "$URL" resize '{"image": "cat.png", "width": 640}')")
ids+=("$("$S" enqueue --url "$URL" resize '{"image": "dog.png", "width": 320, "flaky": true}')")
ids+=("$("$S" enqueue --url "$URL" resize '{"image": "bad.png"}')")
handlers=(--handler "archive=ARCHIVE_DIR='$TMP/archive' '$EX/handlers/archive.sh'")
command -v node >/dev/null && handlers+=(--handler "resize=node '$EX/handlers/resize.js'")
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --backoff-base 10ms --backoff-cap 50ms \
	"${handlers[@]}" 2>"$TMP/w.log" &
W=$!
want=4
command -v node >/dev/null || want=1
for _ in $(seq 1 300); do
	[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')")" = "$want" ] && break
	sleep 0.1
done
kill -TERM $W
wait $W
check_eq "worker drains and exits 0" "$?" 0
check_eq "shell handler: payload archived from stdin" "$(cat "$TMP/archive/${ids[0]}.json")" '{"doc": "a"}'
check_eq "shell handler: result kept" "$(q "SELECT state || ' ' || (result->>'archived' = id::text) || ' ' || (result->>'fencing') FROM skiplock.all_jobs WHERE id = ${ids[0]}")" "completed true 1"
if command -v node >/dev/null; then
	check_eq "node handler: result from stdout" "$(q "SELECT state || ' ' || (result->>'height') || ' ' || (result->>'attempt') FROM skiplock.all_jobs WHERE id = ${ids[1]}")" "completed 480 1"
	check_eq "node handler: exit 75 retried, then completed" "$(q "SELECT state || ' ' || attempt || ' ' || (errors->0->>'error') FROM skiplock.all_jobs WHERE id = ${ids[2]}")" "completed 2 exit status 75; stderr: image store busy"
	check_eq "node handler: exit 65 discarded at once" "$(q "SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = ${ids[3]}")" "discarded 1"
fi
no_leftovers
finish
