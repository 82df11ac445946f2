#!/usr/bin/env bash
# The operator's fleet-wide actions from the command line: bulk retry of
# 500 discarded jobs by filter while a real worker runs (each ends completed
# exactly once, the action log says 500), dry runs, the --yes rule, bad
# filters (exit 2, one line, nothing written), pausing a queue and a kind
# under a running worker, cron run, pause and resume, logged breakers, and
# the action log.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
# --poll-idle: through PgBouncer a worker hears no NOTIFY, and one that
# turned idle (10 x --poll-max without a job) before the bulk retry would
# look again only after the default 10 minutes.
FAST=(--poll 50ms --poll-max 200ms --poll-idle 500ms --log-level warning)
ACTOR="$(id -un)@$(hostname)"
stop_worker() { kill -TERM "$1" 2>/dev/null; wait "$1"; }
actions() { q "SELECT count(*) FROM skiplock.actions"; }

# --- bulk retry by filter, racing a worker ---
q "INSERT INTO skiplock.finished_jobs (kind, state, attempt, max_attempts, errors, finished_at, expires_at)
   SELECT 'bulk', 'discarded', 1, 1, '[{\"attempt\": 1, \"error\": \"upstream 503\"}]', now(), 'infinity'
     FROM generate_series(1, 500)" >/dev/null
q "INSERT INTO skiplock.finished_jobs (kind, state, attempt, max_attempts, finished_at, expires_at)
   VALUES ('bulk', 'discarded', 1, 1, now() - interval '3 hours', 'infinity')" >/dev/null
"$S" worker --url "$URL" "${FAST[@]}" --handler 'bulk=cat >/dev/null; echo "{}"' 2>"$TMP/w.log" &
W=$!
check_eq "dry run counts the last hour's discarded jobs, up to the highest id counted" \
	"$("$S" jobs retry --url "$URL" --state discarded --kind bulk --since 1h --error 503 --dry-run)" \
	"500 matched, up to job $(q "SELECT max(id) FROM skiplock.all_jobs WHERE finished_at > now() - interval '1 hour'")"
check_eq "a dry run writes no log row" "$(actions)" 0
out=$("$S" jobs retry --url "$URL" --state discarded --kind bulk --since 1h --batch 100 --yes 2>&1)
check_eq "bulk retry prints its counts" "$out" "500 matched, 500 retried, 0 skipped"
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'" 500 60 ||
	fail "worker did not complete the retried jobs: $(cat "$TMP/w.log")"
stop_worker $W
check_eq "each retried job ran exactly once more" \
	"$(q "SELECT state, attempt, count(*) FROM skiplock.all_jobs GROUP BY 1, 2 ORDER BY 1")" \
	"completed|2|500
discarded|1|1"
check_eq "the action log says 500" \
	"$(q "SELECT actor || ' ' || role || ' ' || action || ' ' || matched || ' ' || changed || ' ' || (target ->> 'since' IS NULL) || ' ' || (target ->> 'from') || ' ' || (target ->> 'time_field') FROM skiplock.actions")" \
	"$ACTOR cli retry 500 500 true 1h finished"
"$S" jobs actions --url "$URL" | grep -qE "^ *1 +[0-9-]+ [0-9:]+ +$ACTOR +cli +$SKL_TEST_DBUSER +retry +500 +500 +\{" &&
	pass "jobs actions: a row per action" || fail "jobs actions: $("$S" jobs actions --url "$URL")"
check_eq "jobs actions --json" "$("$S" jobs actions --url "$URL" --json | tr -d ' \n' | grep -o '"matched":500,"changed":500')" '"matched":500,"changed":500'

# --- the --yes rule and bad input: exit 2, one line, nothing written ---
bad() { expect_exit "$1" 2 "$2" -- "$S" "${@:3}" --url "$URL" </dev/null; }
bad "several jobs without --yes, stdin not a terminal" 'pass --yes' jobs cancel --kind bulk
bad "payload that is not JSON" 'payload filter is not JSON' jobs cancel --kind bulk --payload '{' --yes
bad "unknown time field" 'unknown time field "when"' jobs discard --kind bulk --time-field when --since 1h --yes
bad "a bound that is no time" 'neither a timestamp' jobs cancel --kind bulk --from 2026-13-01 --yes
bad "--since and --from" 'one of --since and --from' jobs cancel --since 1h --from 2h --yes
bad "IDs and filters" 'IDs or filters, not both' jobs cancel 1 --kind bulk --yes
bad "neither IDs nor filters" 'name the jobs' jobs discard --yes
bad "--attempts with a filter" '--attempts goes with one job ID only' jobs retry --kind bulk --attempts 2 --yes
bad "batch too large" '--batch: at most 10000' jobs cancel --kind bulk --batch 20000 --yes
bad "empty --error" '--error must not be empty' jobs cancel --error '' --yes
bad "queue pause without a name" 'one of --queue Q and --kind K' queue pause
bad "queue pause with both" 'one of --queue Q and --kind K' queue pause --queue a --kind b
bad "queue pause of *" 'not "\*"' queue pause --queue '*'
bad "cron run without a name" 'expected NAME' cron run
check_eq "bad input wrote nothing" "$(actions) $(q "SELECT count(*) FROM skiplock.pauses") $(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'")" "1 0 500"

# --- one ID: today's lines, logged too ---
d=$("$S" enqueue --url "$URL" doomed)
check_eq "discard one job" "$("$S" jobs discard "$d" --url "$URL")" "job $d discarded"
expect_exit "discard it again" 1 "cannot discard job $d: it is discarded" -- "$S" jobs discard "$d" --url "$URL"
check_eq "one ID is logged" "$(q "SELECT action || ' ' || target::text FROM skiplock.actions ORDER BY id DESC LIMIT 1")" "discard {\"ids\": [$d]}"

# --- pause a queue and a kind under a running worker ---
check_eq "pause a queue" "$("$S" queue pause --url "$URL" --queue mail)" 'queue "mail" paused'
check_eq "pause it again" "$("$S" queue pause --url "$URL" --queue mail)" 'queue "mail" was already paused'
check_eq "pause a kind" "$("$S" queue pause --url "$URL" --kind report)" 'kind "report" paused'
"$S" queue paused --url "$URL" | grep -qE "^mail +\* +[0-9-]+ [0-9:]+ +$ACTOR +cli$" &&
	pass "queue paused lists the queue" || fail "queue paused: $("$S" queue paused --url "$URL")"
m=$("$S" enqueue --url "$URL" --queue mail send)
r=$("$S" enqueue --url "$URL" report)
o=$("$S" enqueue --url "$URL" send)
"$S" worker --url "$URL" "${FAST[@]}" --queue mail --queue default \
	--handler 'send=cat >/dev/null; echo "{}"' --handler 'report=cat >/dev/null; echo "{}"' 2>"$TMP/w2.log" &
W=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $o" completed 20 || fail "the other job did not run"
sleep 1
check_eq "paused queue and kind: jobs wait, no attempt used" \
	"$(q "SELECT string_agg(state || '/' || attempt, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($m, $r)")" \
	"available/0 available/0"
check_eq "resume the queue" "$("$S" queue resume --url "$URL" --queue mail)" 'queue "mail" resumed'
check_eq "resume the kind" "$("$S" queue resume --url "$URL" --kind report)" 'kind "report" resumed'
wait_for "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($m, $r)" \
	"completed completed" 20 && pass "resumed jobs run" || fail "resumed jobs: $(cat "$TMP/w2.log")"
stop_worker $W
check_eq "resume of a running queue" "$("$S" queue resume --url "$URL" --queue mail)" 'queue "mail" was already running'
check_eq "queue paused --json when nothing is" "$("$S" queue paused --url "$URL" --json)" "[]"

# --- cron run, breakers: logged ---
"$S" cron add --url "$URL" nightly '0 3 * * *' report '{"full": true}' --queue reports >/dev/null || fail "cron add"
before=$(q "SELECT next_fire FROM skiplock.schedules")
out=$("$S" cron run --url "$URL" nightly)
j=${out##* }
check_eq "cron run prints the job" "$out" "schedule \"nightly\" enqueued job $j"
check_eq "the job is the schedule's" "$(q "SELECT kind || ' ' || queue || ' ' || payload::text FROM skiplock.jobs WHERE id = $j")" \
	'report reports {"full": true}'
check_eq "next fire unchanged" "$(q "SELECT next_fire FROM skiplock.schedules")" "$before"
expect_exit "cron run of no schedule" 1 'no schedule "nope"' -- "$S" cron run --url "$URL" nope
check_eq "cron pause and resume" "$("$S" cron pause --url "$URL" nightly; "$S" cron resume --url "$URL" nightly)" \
	'schedule "nightly" paused
schedule "nightly" resumed'
check_eq "a resumed schedule skips the fire times that passed: its next one is ahead" \
	"$(q "SELECT enabled AND next_fire > now() AND coalesce(last_fire <= now(), true) FROM skiplock.schedules")" t
"$S" breakers open report --url "$URL" >/dev/null && "$S" breakers close report --url "$URL" >/dev/null ||
	fail "breakers open/close"
check_eq "pauses, resumes, cron add and run, and breakers are logged" \
	"$(q "SELECT string_agg(action || ':' || changed, ' ' ORDER BY id) FROM skiplock.actions WHERE action NOT IN ('retry', 'discard')")" \
	"pause:1 pause:0 pause:1 resume:1 resume:1 resume:0 schedule_add:1 schedule_run:1 schedule_pause:1 schedule_resume:1 breaker_open:1 breaker_close:1"
# --- the count's mark: --up-to and --expect act on at most what was counted ---
mk=$(for i in 1 2 3; do "$S" enqueue --url "$URL" --queue markq mk "{\"i\": $i}"; done | tr '\n' ' ')
out=$("$S" jobs cancel --url "$URL" --queue markq --dry-run)
MARK=${out##* }
check_eq "dry run: the count and its mark" "$out" "3 matched, up to job $(q "SELECT max(id) FROM skiplock.jobs WHERE queue = 'markq'")"
for i in 4 5; do "$S" enqueue --url "$URL" --queue markq mk "{\"i\": $i}" >/dev/null; done
check_eq "cancel with the count's mark: newer jobs left alone, and said so" \
	"$("$S" jobs cancel --url "$URL" --queue markq --up-to "$MARK" --expect 3 --yes)" \
	"3 matched, 3 cancelled, 0 skipped; 2 newer jobs match and were left alone"
check_eq "the newer jobs are untouched" \
	"$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE queue = 'markq'")" \
	"cancelled cancelled cancelled available available"
out=$("$S" jobs discard --url "$URL" --queue markq --state available --dry-run)
MARK=${out##* }
"$S" jobs retry --url "$URL" "${mk%% *}" >/dev/null || fail "retry one markq job"
expect_exit "more jobs up to the mark than counted: refused" 1 \
	"the jobs matching changed since the count: 3 match up to job $MARK, 2 were counted; count again" -- \
	"$S" jobs discard --url "$URL" --queue markq --state available --up-to "$MARK" --expect 2 --yes
check_eq "the refused action changed nothing" \
	"$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE queue = 'markq'")" \
	"available cancelled cancelled available available"
bad "--up-to without --expect" '--up-to and --expect go together' jobs discard --queue markq --up-to 5 --yes
bad "--up-to with IDs" '--up-to and --expect go with filters' jobs discard 1 2 --up-to 5 --expect 2 --yes
bad "--expect 0" '--expect: "0" is not an integer from 1' jobs discard --queue markq --up-to 5 --expect 0 --yes
# Asked on a terminal, the answer acts on what the question counted.
if command -v script >/dev/null; then
	{ for _ in $(seq 1 300); do grep -qs 'y/N' "$TMP/ts" && break; sleep 0.1; done
	  "$S" enqueue --url "$URL" --queue markq mk '{"i": 6}' >/dev/null; echo y; } |
		script -qefc "'$S' jobs cancel --url '$URL' --queue markq --state available" "$TMP/ts" >/dev/null
	check_eq "on a terminal: the question's count and mark are the action's" \
		"$(tr -d '\r' <"$TMP/ts" | grep -o '3 jobs match.*\|^[0-9]* matched.*')" \
		"3 jobs match. Cancel them? [y/N] y
3 matched, 3 cancelled, 0 skipped; 1 newer job matches and was left alone"
fi

# --- a filter that matches every job must be named so: --all ---
bad "a time field without a bound" 'the filter matches every job \(a time field without a bound\): pass --all to act on every job' \
	jobs cancel --time-field created --yes
bad "an empty payload" 'the filter matches every job \(an empty payload filter\): pass --all' jobs cancel --payload '{}' --yes
bad "an empty array payload" 'the filter matches every job \(an empty payload filter\)' jobs cancel --payload ' [ ] ' --yes
bad "both" 'matches every job \(a time field without a bound, an empty payload filter\)' \
	jobs cancel --time-field run --payload '{}' --yes
bad "neither IDs nor filters names --all" 'name the jobs: IDs, at least one filter, or --all' jobs cancel --yes
bad "--all with IDs" '--all goes with filters' jobs cancel 1 --all --yes
check_eq "such a filter still counts" "$("$S" jobs cancel --url "$URL" --time-field created --dry-run | cut -d, -f1)" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs") matched"
want="$(q "SELECT count(*) FROM skiplock.all_jobs") matched, $(q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('available', 'running')") cancelled"
check_eq "with --all it acts on every job" \
	"$("$S" jobs cancel --url "$URL" --time-field created --all --yes | cut -d, -f1,2)" "$want"
check_eq "every job is finished now" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('available', 'running')")" 0
check_eq "--all is logged" "$(q "SELECT (target ->> 'all') || ' ' || (target ->> 'time_field') FROM skiplock.actions ORDER BY id DESC LIMIT 1")" "true created"
check_eq "--all alone: every job" "$("$S" jobs retry --url "$URL" --all --dry-run | cut -d, -f1)" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs") matched"
no_leftovers
finish
