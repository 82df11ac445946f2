#!/usr/bin/env bash
# Worker options from the environment (SKIPLOCK_<OPTION>) and a JSON file
# (--config FILE), so a unit file needs no argument string: per option, a
# flag wins over the environment, which wins over the file.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
unset SKIPLOCK_CONCURRENCY SKIPLOCK_OWNER SKIPLOCK_LEASE SKIPLOCK_HANDLER SKIPLOCK_FENCING SKIPLOCK_QUEUE

# started ARGS...: runs a worker until it logs its start line; prints that line
started() {
	rm -f "$TMP/err" # before the child opens it: no start line of the last run
	"$@" >"$TMP/out" 2>"$TMP/err" &
	local pid=$!
	for _ in $(seq 1 100); do grep -qs " started: " "$TMP/err" && break; sleep 0.05; done
	kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
	grep -o "worker [^ ]* started: .*" "$TMP/err" || echo "no start line: $(cat "$TMP/err")"
}
W=("$S" worker --url "$URL" --poll 50ms)
cat >"$TMP/w.json" <<'JSON'
{"concurrency": 3, "owner": "from-file", "lease": "40s", "handler": ["a=cat >/dev/null", "b=cat >/dev/null"],
 "no-cron": true, "queue": ["q1", "q2"]}
JSON
check_eq "the file" "$(started "${W[@]}" --config "$TMP/w.json")" \
	"worker from-file started: 2 kind(s), concurrency 3, lease 40000 ms"
check_eq "the environment wins over the file" \
	"$(SKIPLOCK_CONCURRENCY=5 SKIPLOCK_HANDLER='c=true' started "${W[@]}" --config "$TMP/w.json")" \
	"worker from-file started: 1 kind(s), concurrency 5, lease 40000 ms"
check_eq "a flag wins over both" \
	"$(SKIPLOCK_CONCURRENCY=5 SKIPLOCK_OWNER=from-env started "${W[@]}" --config "$TMP/w.json" --concurrency 7)" \
	"worker from-env started: 2 kind(s), concurrency 7, lease 40000 ms"
check_eq "a repeated option's values on separate lines" \
	"$(SKIPLOCK_HANDLER=$'a=true\nb=true\nc=true' SKIPLOCK_OWNER=env started "${W[@]}")" \
	"worker env started: 3 kind(s), concurrency 8, lease 30000 ms"
check_eq "inside lease run, SKIPLOCK_LEASE is the lease's name, not --lease" \
	"$(SKIPLOCK_FENCING=4 SKIPLOCK_LEASE=nightly SKIPLOCK_OWNER=o started "${W[@]}" --handler a=true)" \
	"worker o started: 1 kind(s), concurrency 8, lease 30000 ms"

# the file's queues reach the worker: only q2's job runs
"$S" enqueue --url "$URL" --queue q2 a >/dev/null
"$S" enqueue --url "$URL" --queue q3 a >/dev/null
"${W[@]}" --config "$TMP/w.json" 2>/dev/null &
WP=$!
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'" 1 20 || fail "the q2 job did not run"
kill -TERM $WP; wait $WP
check_eq "queues from the file" "$(q "SELECT string_agg(queue || ':' || state, ' ' ORDER BY queue) FROM skiplock.all_jobs")" "q2:completed q3:available"

expect_exit "a bad value names its variable" 2 'SKIPLOCK_CONCURRENCY: --concurrency: "lots" is not an integer' -- \
	env SKIPLOCK_CONCURRENCY=lots "${W[@]}" --handler a=true
expect_exit "a flag variable takes yes or no" 2 'SKIPLOCK_NO_CRON: expected 1, true, yes, 0, false or no, got "maybe"' -- \
	env SKIPLOCK_NO_CRON=maybe "${W[@]}" --handler a=true
echo '{"concurency": 3}' >"$TMP/typo.json"
expect_exit "an unknown key in the file" 2 "--config .*typo.json: unknown option \"concurency\"" -- \
	"${W[@]}" --handler a=true --config "$TMP/typo.json"
echo '{"concurrency": 0}' >"$TMP/zero.json"
expect_exit "a bad value in the file names it" 2 '"concurrency": --concurrency: "0" is not an integer from 1' -- \
	"${W[@]}" --handler a=true --config "$TMP/zero.json"
echo '{"concurrency": 3' >"$TMP/broken.json"
expect_exit "a file that is not JSON" 2 "--config .*broken.json: line 2" -- \
	"${W[@]}" --handler a=true --config "$TMP/broken.json"
expect_exit "a missing file" 2 "--config $TMP/none.json: unable to open" -- \
	"${W[@]}" --handler a=true --config "$TMP/none.json"
# Only a regular file of at most 1 MiB is read: a FIFO is refused at once
# (never waited on), and so are a directory and a device; a larger file is
# refused before it is read.
mkfifo "$TMP/fifo.json"
expect_exit "a FIFO: refused at once" 2 "--config $TMP/fifo.json: not a regular file \(a FIFO\)" -- \
	timeout 10 "${W[@]}" --handler a=true --config "$TMP/fifo.json"
expect_exit "a directory: refused" 2 "--config $TMP: not a regular file \(a directory\)" -- \
	timeout 10 "${W[@]}" --handler a=true --config "$TMP"
expect_exit "a device: refused" 2 "--config /dev/zero: not a regular file \(a device\)" -- \
	timeout 10 "${W[@]}" --handler a=true --config /dev/zero
{ printf '{'; head -c 1048576 /dev/zero | tr '\0' ' '; printf '"concurency": 3}'; } >"$TMP/big.json"
expect_exit "a file over 1 MiB: refused" 2 "--config $TMP/big.json: larger than 1 MiB \(1048593 bytes\)" -- \
	timeout 10 "${W[@]}" --handler a=true --config "$TMP/big.json"
expect_exit "--config is the worker's" 2 'unknown option "--config"' -- \
	"$S" status --url "$URL" --config "$TMP/w.json"
"$S" worker --help | grep -q "flags win over the environment, which wins over the file" &&
	pass "worker --help states the precedence" || fail "worker --help"
finish
