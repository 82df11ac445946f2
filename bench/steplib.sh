# shellcheck shell=bash
# bench/steplib.sh — sourced by the step scripts bench/fleet, bench/backlog
# and bench/soak: their shared option handling and database helpers.
#
# A step script measures on a cluster that bench/run started
# (tests/harness/cluster, --cluster STATE_DIR) and prints its samples on
# stdout, one "key<TAB>value" line each, which bench/run adds to the run's
# samples; progress goes to stderr.  Run without --cluster, the script
# hands itself to bench/run (exec bench/run --only STEP --STEP "ARGS"),
# which starts the cluster, calls it back and writes bench/results.
#
# Options every step takes (bench/run passes them):
#   --cluster DIR   the harness state directory (its env.sh)
#   --bin DIR       the compiled benchmark programs (skl-bench-*)
#   --skiplock PATH the skiplock command
#   --work DIR      a scratch directory (logs, counters)
#   --reps N        repetitions (where the step repeats)
#   --quick         the small sizes
# and, handed to bench/run when there is no --cluster: --keep, --results DIR.
# Besides its samples a step writes, in its --work directory, what bench/run
# adds to the results: figures.txt, ratios.txt and targets.txt (lines in the
# formats of bench/report.awk) and extra.md (Markdown after the tables).

STEP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
CLUSTER="" BIN="" SKL="" SWORK="" REPS=3 QUICK=0
RUN_OPTS=() OWN_ARGS=()

sdie() { echo "$STEP: $*" >&2; exit 2; }
sfail() { echo "$STEP: $*" >&2; exit 1; }
sprog() { printf '%s: %s\n' "$STEP" "$*" >&2; }
sample() { printf '%s\t%s\n' "$1" "$2"; }
usage_of() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$1"; }
need_int() { [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "${3:-1}" ] || sdie "$1 needs a whole number >= ${3:-1}, not '$2'"; }

# needs_value OPT LIST...: true when OPT takes a value (a common option or in LIST).
needs_value() {
  local o=$1; shift
  [[ " --cluster --bin --skiplock --work --reps --results $* " == *" $o "* ]]
}

# step_common OPT VALUE: 0 (and sets the variable) when OPT is a common
# option, 1 otherwise.  Called by each script's own option loop.
step_common() {
  case $1 in
    --cluster) CLUSTER=$2 ;;
    --bin) BIN=$2 ;;
    --skiplock) SKL=$2 ;;
    --work) SWORK=$2 ;;
    --reps)
      need_int --reps "$2"
      # shellcheck disable=SC2034 # REPS is read by the step scripts that source this file
      REPS=$2 ;;
    --results) RUN_OPTS+=(--results "$2") ;;
    *) return 1 ;;
  esac
}

# step_start: after option parsing.  Without --cluster, execs bench/run
# for this step alone; else loads the cluster's environment.
step_start() {
  if [ -z "$CLUSTER" ]; then
    [ $QUICK -eq 0 ] || RUN_OPTS+=(--quick)
    exec "$STEP_ROOT/bench/run" --only "$STEP" --baseline none "${RUN_OPTS[@]}" \
      "--$STEP" "${OWN_ARGS[*]}"
  fi
  [ -f "$CLUSTER/env.sh" ] || sdie "--cluster: no env.sh in $CLUSTER"
  [ -n "$BIN" ] && [ -n "$SKL" ] && [ -n "$SWORK" ] || sdie "--cluster needs --bin, --skiplock and --work"
  # shellcheck source=/dev/null
  . "$CLUSTER/env.sh"
  PSQL=$SKL_TEST_PGBIN/psql; [ -x "$PSQL" ] || PSQL=$(command -v psql)
  mkdir -p "$SWORK"
  : > "$SWORK/figures.txt"; : > "$SWORK/ratios.txt"; : > "$SWORK/targets.txt"; : > "$SWORK/extra.md"
}
# figure KEY LABEL UNIT [SCALE] [DECIMALS] / ratio LABEL NUM DEN [TARGET] /
# target LABEL KEY TARGET UNIT: registers a line for the results.
figure() { printf '%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "${4:-1}" "${5:-0}" >> "$SWORK/figures.txt"; }
ratio() { printf '%s|%s|%s|%s\n' "$1" "$2" "$3" "${4:-}" >> "$SWORK/ratios.txt"; }
target() { printf '%s|%s|1|%s|%s\n' "$1" "$2" "$3" "$4" >> "$SWORK/targets.txt"; }

# workers_alive FILE: fails (with the workers' log) when a pid in FILE has exited.
workers_alive() {
  local p
  for p in $(cat "$1"); do
    kill -0 "$p" 2>/dev/null && continue
    tail -n 5 "$SWORK/workers.log" >&2
    sfail "worker $p exited early"
  done
}

# dburl DB [PORT] [APP]: a URL of database DB (direct unless PORT is given).
dburl() {
  echo "postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:${2:-$SKL_TEST_PGPORT}/$1?application_name=${3:-skl-bench-control}"
}
# qdb DB PSQL-ARGS...: psql on database DB, direct, errors fatal.
qdb() { local db=$1; shift; PGOPTIONS="-c client_min_messages=warning" timeout -k 5 3600 "$PSQL" -X -q -At -v ON_ERROR_STOP=1 "$(dburl "$db")" "$@"; }

# new_db NAME: a fresh database with skiplock installed by `skiplock init`
# (dropped first if it exists).
new_db() {
  qdb "$SKL_TEST_DBNAME" -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" ||
    sfail "cannot create database $1"
  "$SKL" init --url "$(dburl "$1" "" skl-init)" --log-level warning >/dev/null || sfail "skiplock init of $1 failed"
}

# fill DB KIND N: N jobs of KIND enqueued by skiplock.enqueue_many, 50,000
# per statement (each its own transaction), then VACUUM ANALYZE and a
# CHECKPOINT.  Prints the enqueue rate (jobs/s) on stdout.
fill() {
  local db=$1 kind=$2 n=$3 k left t0 t1
  left=$n
  t0=$EPOCHREALTIME
  while [ "$left" -gt 0 ]; do
    k=$(( left < 50000 ? left : 50000 ))
    echo "SELECT cardinality(skiplock.enqueue_many(NULL, array_fill('$kind'::text, ARRAY[$k]),"\
         "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL));"
    left=$(( left - k ))
  done > "$SWORK/fill.sql"
  qdb "$db" -f "$SWORK/fill.sql" > /dev/null || sfail "enqueueing $n jobs into $db failed"
  t1=$EPOCHREALTIME
  qdb "$db" -c "VACUUM ANALYZE" -c "CHECKPOINT" || sfail "VACUUM ANALYZE of $db failed"
  awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }'
}

# status_sum DB FIELD...: the sum of these fields of `skiplock status --json`
# over every queue and kind (the command's view, whatever the storage).
status_sum() {
  local db=$1 out; shift
  out=$("$SKL" status --json --url "$(dburl "$db" "" skl-bench-status)" --log-level warning) ||
    sfail "skiplock status on $db failed"
  jq -r --argjson f "$(printf '%s\n' "$@" | jq -R . | jq -s .)" \
    '[.queues[] as $q | $f[] | $q[.] // 0] | add // 0' <<< "$out"
}

# counter_new FILE / counter_read FILE: the handler-start counter that
# skl-bench-worker --counter shares (slot 0 of a 4 KiB file, native u64).
counter_new() { rm -f "$1"; truncate -s 4096 "$1"; }
counter_read() { od -An -t u8 -N 8 "$1" | tr -d ' '; }

# percentile P: the P-th percentile (nearest rank) of the numbers on stdin.
percentile() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) exit 1; i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; print v[i] }'; }

# spawn_workers N FILE ARGS...: N skl-bench-worker processes with ARGS,
# their pids written to FILE, stderr to the work directory's workers.log.
spawn_workers() {
  local n=$1 pidfile=$2 i; shift 2
  : > "$pidfile"
  for ((i = 0; i < n; i++)); do
    "$BIN/skl-bench-worker" "$@" >/dev/null 2>> "$SWORK/workers.log" &
    echo $! >> "$pidfile"
  done
}
# stop_workers FILE: SIGTERM to each pid in FILE, SIGKILL to any left after 60 s.
stop_workers() {
  local p left
  [ -s "$1" ] || return 0
  for p in $(cat "$1"); do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 600); do
    left=0
    for p in $(cat "$1"); do kill -0 "$p" 2>/dev/null && { left=1; break; }; done
    [ $left -eq 1 ] || break
    sleep 0.1
  done
  for p in $(cat "$1"); do kill -KILL "$p" 2>/dev/null || true; done
  for p in $(cat "$1"); do wait "$p" 2>/dev/null || true; done
  : > "$1"
}
