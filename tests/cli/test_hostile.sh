#!/usr/bin/env bash
# Hostile names end to end: kinds, queues, unique keys, schedule names,
# lease names and idempotency keys that look like SQL, hold quotes,
# backslashes, array-literal syntax or non-ASCII text go through enqueue
# (single and batch), the worker (its handler sees the exact kind), jobs
# list/show, status, cron and leases, and come back byte for byte
# (idempotency keys through the SQL function; the C calls pass them as
# parameters too).  Every
# one is a statement parameter, never SQL text: the table "t" that the
# names try to drop is still there at the end.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
q "CREATE TABLE public.t (x int)"  # (not "t": the user skiplock has a schema of its name)
K1='x"; DROP TABLE t; --'
K2='ünïcödé'
K3='a-b.c'
K4="q'); DROP TABLE t; -- {\"a\",NULL}\\"
sqlq() { printf '$h$%s$h$' "$1"; }   # a dollar-quoted SQL literal for the checks
count() { q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = $(sqlq "$1") AND queue = $(sqlq "$2")"; }
export OUTDIR=$TMP

# --- enqueue, single and batch ---
id1=$("$S" enqueue --url "$URL" --queue "$K2" --unique-key "$K1" "$K1" '{"n": 1}')
id1b=$("$S" enqueue --url "$URL" --queue "$K2" --unique-key "$K1" "$K1" '{"n": 2}')
check_eq "hostile unique key deduplicates" "$id1b" "$id1"
jq_str() { # JSON string of $1, made by the command itself
	printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}
printf '{"kind":"%s","queue":"%s"}\n{"kind":"%s","queue":"%s","unique_key":"%s"}\n' \
	"$(jq_str "$K2")" "$(jq_str "$K3")" "$(jq_str "$K4")" "$(jq_str "$K1")" "$(jq_str "$K4")" |
	"$S" enqueue --url "$URL" --batch - >"$TMP/batch.ids" 2>"$TMP/batch.err" &&
	pass "batch with hostile names" || fail "batch with hostile names: $(cat "$TMP/batch.err")"
check_eq "kinds and queues stored exactly" "$(count "$K1" "$K2") $(count "$K2" "$K3") $(count "$K4" "$K1")" "1 1 1"
check_eq "unique key stored exactly" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE unique_key IN ($(sqlq "$K1"), $(sqlq "$K4"))")" 2

# --- the worker: queues as an array parameter, the kind in the handler's environment ---
H='cat >/dev/null; printf "%s" "$SKIPLOCK_JOB_KIND" >"$OUTDIR/kind.$SKIPLOCK_JOB_ID"; echo "{}"'
"$S" worker --url "$URL" --queue "$K1" --queue "$K2" --queue "$K3" --poll 50ms --poll-max 200ms --no-cron \
	--handler "$K1=$H" --handler "$K2=$H" --handler "$K4=$H" 2>"$TMP/worker.log" &
WPID=$!
for _ in $(seq 1 300); do
	[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'")" = 3 ] && break
	sleep 0.1
done
kill -TERM $WPID; wait $WPID
check_eq "worker ran every hostile kind" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'")" 3
check_eq "handler saw the exact kind" "$(cat "$TMP/kind.$id1" 2>/dev/null)" "$K1"
k4id=$(q "SELECT id FROM skiplock.all_jobs WHERE kind = $(sqlq "$K4")")
check_eq "handler saw the exact kind (quotes, braces, backslash)" "$(cat "$TMP/kind.$k4id" 2>/dev/null)" "$K4"

# --- inspecting ---
"$S" jobs list --url "$URL" --kind "$K1" >"$TMP/list" 2>&1
grep -qF -- "$K1" "$TMP/list" && [ "$(grep -c completed "$TMP/list")" = 1 ] && pass "jobs list --kind hostile" || fail "jobs list: $(cat "$TMP/list")"
"$S" jobs show --url "$URL" "$k4id" --json >"$TMP/show" 2>&1
grep -qF -- "$(jq_str "$K4")" "$TMP/show" && pass "jobs show --json escapes the kind" || fail "jobs show: $(cat "$TMP/show")"
"$S" status --url "$URL" >"$TMP/status" 2>&1
grep -qF -- "$K2" "$TMP/status" && grep -qF -- "$K3" "$TMP/status" && pass "status shows unicode and dotted names" || fail "status: $(cat "$TMP/status")"

# --- cron and leases ---
"$S" cron add --url "$URL" "$K1" '@every 1s' "$K4" --queue "$K2" --at 2026-01-01T00:00:00Z >/dev/null 2>"$TMP/cron.err" &&
	pass "cron add with hostile names" || fail "cron add: $(cat "$TMP/cron.err")"
"$S" cron tick --url "$URL" --at 2026-01-01T00:00:01Z >/dev/null 2>&1
check_eq "cron enqueued the hostile kind into the hostile queue" "$(count "$K4" "$K2")" 1
"$S" cron list --url "$URL" | grep -qF -- "$K1" && pass "cron list shows the name" || fail "cron list"
"$S" cron pause --url "$URL" "$K1" >/dev/null && "$S" cron remove --url "$URL" "$K1" >/dev/null &&
	pass "cron pause and remove by hostile name" || fail "cron pause/remove"
"$S" lease run --url "$URL" "$K4" --ttl 10s --owner "$K1" -- true 2>"$TMP/lease.err" &&
	pass "lease run with hostile name and owner" || fail "lease run: $(cat "$TMP/lease.err")"
check_eq "lease stored exactly" "$(q "SELECT count(*) FROM skiplock.leases WHERE name = $(sqlq "$K4")")" 1
"$S" lease list --url "$URL" | grep -qF -- "$K4" && pass "lease list shows the name" || fail "lease list"
check_eq "idempotency key claimed" "$(q "SELECT outcome FROM skiplock.idem_claim($(sqlq "$K4"), 'h')")" acquired
check_eq "idempotency key stored exactly" "$(q "SELECT count(*) FROM skiplock.idempotency_keys WHERE key = $(sqlq "$K4")")" 1
check_eq "table t is still there" "$(q "SELECT to_regclass('public.t') IS NOT NULL")" t
no_leftovers
finish
