#!/usr/bin/env bash
# cutproxy_test.sh — exercise tests/tools/cutproxy.c against a real PostgreSQL
#
# Builds cutproxy into a temp dir, starts a throwaway PostgreSQL 15 on
# 127.0.0.1 (trust auth, a free port), puts cutproxy in front of it and
# checks every mode and command with psql and pgbench.  Everything it starts
# is stopped and every temp dir removed on exit; every wait is bounded.
#
# Usage: tests/tools/cutproxy_test.sh [--asan]
#   --asan   run the proxy built with -fsanitize=address,undefined
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), CC (default gcc),
#   KEEP_TMP=1 keeps the temp dirs for a post-mortem.
# Output: one PASS/FAIL line per check and a summary; exit 0 only if all pass.
#
# PostgreSQL refuses to run as root, so as root the cluster runs as the OS
# user skiplock-pg (created if missing) through runuser.

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/cutproxy.c
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CC=${CC:-gcc}
pg_os_user=skiplock-pg
cflags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2)

sanitize=0
case "${1:-}" in
    --asan) sanitize=1 ;;
    "") ;;
    *) echo "usage: $0 [--asan]" >&2; exit 2 ;;
esac

tmp=$(mktemp -d /tmp/cutproxy-test.XXXXXX)
pgroot=$(mktemp -d /tmp/cutproxy-pg.XXXXXX)
ctl_sock=$tmp/ctl.sock
proxy_log=$tmp/proxy.log
proxy_pid=
pg_started=0
bg_pids=()
checks=0
failures=0

# ------------------------------------------------------------- plumbing

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${bg_pids[@]}" $proxy_pid; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    if [ "$pg_started" = 1 ]; then
        as_pg "$PGBIN/pg_ctl" -D "$pgroot/data" -m immediate -w -t 10 stop \
            >/dev/null 2>&1
    fi
    if [ "${KEEP_TMP:-0}" = 1 ]; then
        echo "kept $tmp $pgroot"
    else
        rm -rf "$tmp" "$pgroot"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        (cd / && runuser -u "$pg_os_user" -- "$@")
    else
        "$@"
    fi
}

pass() { checks=$((checks + 1)); echo "PASS $1"; }
fail() {
    checks=$((checks + 1)); failures=$((failures + 1))
    echo "FAIL $1${2:+ -- $2}"
}
# check NAME COMMAND...: PASS if the command succeeds
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
die() { echo "FAIL setup -- $*"; failures=$((failures + 1)); summary; }

summary() {
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' \
            "$tmp"/*.log 2>/dev/null; then
        fail "no sanitizer reports" "$(grep -hE 'Sanitizer|runtime error' "$tmp"/*.log | head -5)"
    fi
    echo "cutproxy_test: $checks checks, $failures failed"
    if [ "$failures" -gt 0 ]; then
        echo "--- proxy log (tail)"; tail -n 40 "$proxy_log" 2>/dev/null
        exit 1
    fi
    exit 0
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# wait_until SECONDS COMMAND...: poll every 50 ms; false on timeout
wait_until() {
    local deadline=$(( $(now_ms) + $1 * 1000 )); shift
    until "$@"; do
        [ "$(now_ms)" -ge "$deadline" ] && return 1
        sleep 0.05
    done
}

# wait_pid PID SECONDS: exit status of PID, or 124 (and kill it) on timeout
wait_pid() {
    local pid=$1
    if ! wait_until "$2" eval "! kill -0 $pid 2>/dev/null"; then
        kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 124
    fi
    wait "$pid"
}

conninfo() { echo "host=127.0.0.1 port=$1 user=postgres dbname=postgres connect_timeout=${2:-5} ${3:-}"; }
psql_at() {     # psql_at PORT [psql args...]; bounded to 20 s
    local port=$1; shift
    timeout -k 2 20 "$PGBIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 \
        -d "$(conninfo "$port")" "$@"
}
q_direct() { psql_at "$pg_port" "$@"; }
q_proxy() { psql_at "$proxy_port" "$@"; }
ctl() { "$bin" ctl "$ctl_sock" "$@"; }
stat_of() { ctl stats | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# ---------------------------------------------------------------- build

build() {
    "$CC" "${cflags[@]}" -o "$tmp/cutproxy" "$src" 2>"$tmp/build.log" ||
        { cat "$tmp/build.log"; die "build failed"; }
    check "build: $CC ${cflags[*]}" test ! -s "$tmp/build.log"
    bin=$tmp/cutproxy
    if [ "$sanitize" = 1 ]; then
        "$CC" "${cflags[@]}" -g -fno-omit-frame-pointer \
            -fsanitize=address,undefined -o "$tmp/cutproxy-asan" "$src" \
            2>"$tmp/build-asan.log" ||
            { cat "$tmp/build-asan.log"; die "asan build failed"; }
        check "build: -fsanitize=address,undefined" test ! -s "$tmp/build-asan.log"
        bin=$tmp/cutproxy-asan
        export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
        export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    fi
}

# ------------------------------------------------------------- postgres

pick_port() {
    local p
    while :; do
        p=$(( 20000 + RANDOM % 40000 ))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
}

start_postgres() {
    [ -x "$PGBIN/initdb" ] || die "no PostgreSQL in $PGBIN"
    if [ "$(id -u)" = 0 ]; then
        useradd -r -M "$pg_os_user" 2>/dev/null || true
        chown "$pg_os_user" "$pgroot"
    fi
    as_pg "$PGBIN/initdb" -D "$pgroot/data" -U postgres --auth=trust \
        --no-locale -E UTF8 --no-sync >"$tmp/initdb.log" 2>&1 ||
        { cat "$tmp/initdb.log"; die "initdb failed"; }
    cat >>"$pgroot/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
fsync = off
EOF
    for _ in 1 2 3 4 5; do
        pg_port=$(pick_port)
        if as_pg "$PGBIN/pg_ctl" -D "$pgroot/data" -l "$pgroot/pg.log" -w \
                -t 30 -o "-p $pg_port" start >/dev/null 2>&1; then
            pg_started=1
            return
        fi
    done
    tail -n 20 "$pgroot/pg.log"; die "postgres did not start"
}

# ---------------------------------------------------------------- proxy

# start_proxy: the proxy under test, on a kernel-chosen port
start_proxy() {
    "$bin" --listen 127.0.0.1:0 --upstream "127.0.0.1:$pg_port" \
        --control "$ctl_sock" --port-file "$tmp/port" --ttl 300 \
        2>>"$proxy_log" &
    proxy_pid=$!
    wait_until 5 test -s "$tmp/port" || die "proxy wrote no port file"
    proxy_port=$(cat "$tmp/port")
    check "port file names a real port ($proxy_port)" test "$proxy_port" -gt 0
}

# ---------------------------------------------------------------- tests

test_usage() {
    local err rc
    "$bin" selftest >"$tmp/selftest.out" 2>&1
    check "selftest (parser, partial reads): $(tail -n 1 "$tmp/selftest.out")" \
        test $? = 0
    err=$("$bin" 2>&1 >/dev/null); rc=$?
    check "usage: no arguments -> exit 2, one stderr line" \
        test "$rc" = 2 -a "$(printf '%s\n' "$err" | wc -l)" = 1
    "$bin" --listen 127.0.0.1:0 --upstream nonsense --control "$tmp/x" \
        2>/dev/null
    check "usage: bad --upstream -> exit 2" test $? = 2
    "$bin" --listen 127.0.0.1:0 --upstream 127.0.0.1:1 --control "$tmp/x" \
        --ttl 0 2>/dev/null
    check "usage: bad --ttl -> exit 2" test $? = 2
    "$bin" ctl "$tmp/x" 2>/dev/null
    check "usage: ctl without a command -> exit 2" test $? = 2
}

test_control() {
    local out rc
    out=$(ctl stats); rc=$?
    check "ctl stats -> ok with counters" eval '[ $rc = 0 ] && [[ $out =~ ^ok\ mode=pass\ delay_ms=0\ armed=0\ accepted=[0-9]+\ active=[0-9]+\ refused=[0-9]+\ reset=[0-9]+\ commit_drops=[0-9]+\ bytes_up=[0-9]+\ bytes_down=[0-9]+$ ]]'
    out=$(ctl mode bogus); rc=$?
    check "ctl mode bogus -> error, exit 1" eval '[ $rc = 1 ] && [[ $out == error* ]]'
    out=$(ctl frobnicate); rc=$?
    check "ctl unknown command -> error, exit 1" eval '[ $rc = 1 ] && [[ $out == error* ]]'
    if command -v socat >/dev/null; then
        out=$(printf 'mode pass\nstats\n' | timeout 5 socat - "UNIX-CONNECT:$ctl_sock")
        check "socat: two commands, two replies" \
            test "$(printf '%s\n' "$out" | grep -c '^ok')" = 2
    else
        echo "SKIP socat: not installed"
    fi
}

test_pass() {
    local a b out
    check "pass: select 1 through the proxy" test "$(q_proxy -c 'select 1')" = 1
    a=$(q_direct -c "copy (select g, md5(g::text) from generate_series(1,300000) g) to stdout" | md5sum)
    b=$(q_proxy -c "copy (select g, md5(g::text) from generate_series(1,300000) g) to stdout" | md5sum)
    check "pass: 11 MB download identical to direct" test "$a" = "$b"
    out=$(seq 1 300000 | q_proxy -c "create temp table u(x int)" \
        -c "copy u from stdin" -c "select count(*) || '|' || sum(x) from u")
    check "pass: 2 MB upload (COPY FROM STDIN) arrives intact" \
        eval '[[ $out == *300000\|45000150000* ]]'
}

test_many() {
    local fds=() fd i n=300 out
    for ((i = 0; i < n; i++)); do
        exec {fd}<>"/dev/tcp/127.0.0.1/$proxy_port" || break
        fds+=("$fd")
    done
    check "concurrency: $n client connections opened" test "${#fds[@]}" = "$n"
    check "concurrency: stats shows >= $n active" \
        wait_until 5 eval '[ "$(stat_of active)" -ge '"$n"' ]'
    # 300 half-open server connections make Postgres fork 300 backends; on a
    # loaded machine that takes a while, so this connect may wait for them
    out=$(timeout -k 2 70 "$PGBIN/psql" -X -A -t -q -d "$(conninfo "$proxy_port" 60)" -c 'select 7')
    check "concurrency: a query still works beside them" test "$out" = 7
    for fd in "${fds[@]}"; do exec {fd}>&-; done
    check "concurrency: all closed again (active=0)" \
        wait_until 10 eval '[ "$(stat_of active)" = 0 ]'
}

test_reset() {
    local pid t0 rc out
    "$PGBIN/psql" -X -d "$(conninfo "$proxy_port" 5 application_name=cp_victim)" \
        -c "select pg_sleep(10)" >/dev/null 2>"$tmp/reset.err" &
    pid=$!; bg_pids+=("$pid")
    wait_until 5 eval '[ "$(q_direct -c "select count(*) from pg_stat_activity where application_name = '"'cp_victim'"' and state = '"'active'"'")" = 1 ]' ||
        fail "reset: victim session never became active"
    t0=$(now_ms)
    out=$(ctl reset)
    check "reset: ctl reset -> $out" eval '[[ $out =~ ^ok\ reset\ [1-9] ]]'
    wait_pid "$pid" 5; rc=$?
    check "reset: pg_sleep(10) session fails fast (rc=$rc, $(( $(now_ms) - t0 )) ms)" \
        eval '[ $rc != 0 ] && [ $rc != 124 ] && [ $(( $(now_ms) - t0 )) -lt 3000 ]'
    check "reset: psql saw the connection die" \
        grep -qiE 'connection|closed|reset' "$tmp/reset.err"
    check "reset: service continues for new connections" \
        test "$(q_proxy -c 'select 3')" = 3
}

test_refuse() {
    local pid t0 rc refused
    "$PGBIN/psql" -X -A -t -d "$(conninfo "$proxy_port" 5 application_name=cp_slow)" \
        -c "select pg_sleep(1.5), 'survived'" >"$tmp/slow.out" 2>&1 &
    pid=$!; bg_pids+=("$pid")
    wait_until 5 eval '[ "$(q_direct -c "select count(*) from pg_stat_activity where application_name = '"'cp_slow'"' and state = '"'active'"'")" = 1 ]' ||
        fail "refuse: slow session never became active"
    refused=$(stat_of refused)
    check "refuse: ctl mode refuse" test "$(ctl mode refuse)" = "ok mode refuse"
    t0=$(now_ms)
    q_proxy -c 'select 1' >/dev/null 2>&1; rc=$?
    check "refuse: new connection fails fast (rc=$rc, $(( $(now_ms) - t0 )) ms)" \
        eval '[ $rc != 0 ] && [ $rc != 124 ] && [ $(( $(now_ms) - t0 )) -lt 2000 ]'
    check "refuse: counted in stats" test "$(stat_of refused)" -gt "$refused"
    wait_pid "$pid" 10; rc=$?
    check "refuse: the existing session keeps working" \
        eval '[ $rc = 0 ] && grep -q survived "$tmp/slow.out"'
    ctl mode pass >/dev/null
    check "refuse: mode pass serves new connections" test "$(q_proxy -c 'select 4')" = 4
}

test_blackhole() {
    local pid rc t0
    check "blackhole: ctl mode blackhole" test "$(ctl mode blackhole)" = "ok mode blackhole"
    t0=$(now_ms)
    timeout 3 "$PGBIN/psql" -X -A -t -d "$(conninfo "$proxy_port" 10)" \
        -c 'select 1' >"$tmp/bh.out" 2>&1; rc=$?
    check "blackhole: psql does not complete within 3 s (rc=$rc)" \
        eval '[ $rc = 124 ] && [ ! -s "$tmp/bh.out" ]'
    "$PGBIN/psql" -X -A -t -d "$(conninfo "$proxy_port" 20)" \
        -c 'select 42' >"$tmp/held.out" 2>&1 &
    pid=$!; bg_pids+=("$pid")
    sleep 1
    check "blackhole: a second client is held, not failed" kill -0 "$pid"
    check "blackhole: ctl mode pass" test "$(ctl mode pass)" = "ok mode pass"
    check "blackhole: new connections work after pass" \
        test "$(q_proxy -c 'select 5')" = 5
    wait_pid "$pid" 10; rc=$?
    check "blackhole: held bytes were kept; the held client completes (rc=$rc)" \
        eval '[ $rc = 0 ] && [ "$(cat "$tmp/held.out")" = 42 ]'
}

test_delay() {
    local t0 dt dt2
    check "delay: ctl delay 500" test "$(ctl delay 500)" = "ok delay 500"
    t0=$(now_ms); q_proxy -c 'select 1' >/dev/null; dt=$(( $(now_ms) - t0 ))
    # connect + query are >= 2 round trips, each crossing the proxy twice
    check "delay: select 1 takes >= 2000 ms (took $dt ms)" test "$dt" -ge 2000
    check "delay: ctl delay 0" test "$(ctl delay 0)" = "ok delay 0"
    t0=$(now_ms); q_proxy -c 'select 1' >/dev/null; dt2=$(( $(now_ms) - t0 ))
    # relative to the delayed run, so a loaded machine does not fail it
    check "delay: removed again (took $dt2 ms, at least 1000 ms less than with it)" \
        test "$dt2" -lt $(( dt - 1000 ))
}

test_drop_commit() {
    local rc out
    q_direct -c "create table t(x int)" >/dev/null || fail "create table t"
    check "drop-commit-reply: armed" \
        test "$(ctl drop-commit-reply)" = "ok drop-commit-reply armed"
    timeout -k 2 20 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 \
        -d "$(conninfo "$proxy_port")" -c "begin" \
        -c "insert into t values (1)" -c "commit" >/dev/null 2>"$tmp/drop.err"
    rc=$?
    check "drop-commit-reply: psql reports a connection failure (rc=$rc)" \
        eval '[ $rc != 0 ] && [ $rc != 124 ] && grep -qiE "closed the connection|connection .*lost|reset by peer" "$tmp/drop.err"'
    check "drop-commit-reply: yet the row IS committed (direct count = 1)" \
        test "$(q_direct -c 'select count(*) from t where x = 1')" = 1
    check "drop-commit-reply: stats commit_drops=1 armed=0" \
        eval '[ "$(stat_of commit_drops)" = 1 ] && [ "$(stat_of armed)" = 0 ]'
    check "drop-commit-reply: logged" grep -q 'reply to COMMIT' "$proxy_log"
    q_proxy -c "begin" -c "insert into t values (9)" -c "commit" >/dev/null
    check "drop-commit-reply: one-shot; the next COMMIT gets its reply" test $? = 0
    ctl drop-commit-reply >/dev/null
    out=$(q_proxy -c "select 'commit'" -c "rollback" 2>/dev/null)
    check "drop-commit-reply: no false trigger on 'select ''commit''' / rollback" \
        eval '[ "$out" = commit ] && [ "$(stat_of armed)" = 1 ]'
    check "drop-commit-reply off: disarms" \
        eval '[ "$(ctl drop-commit-reply off)" = "ok drop-commit-reply off" ] && [ "$(stat_of armed)" = 0 ]'
}

# pgbench speaks the extended protocol: -M extended (unnamed statements)
# and -M prepared (named statements, Parse once, then Bind/Execute)
test_drop_commit_extended() {
    local m x=2 rc drops
    for m in extended prepared; do
        printf 'begin;\ninsert into t values (%d);\ncommit;\n' "$x" >"$tmp/tx.sql"
        # shellcheck disable=SC2034 # read by the eval'd condition below
        drops=$(stat_of commit_drops)
        ctl drop-commit-reply >/dev/null
        timeout -k 2 20 "$PGBIN/pgbench" -n -t 1 -M "$m" -f "$tmp/tx.sql" \
            -h 127.0.0.1 -p "$proxy_port" -U postgres postgres \
            >"$tmp/pgbench.out" 2>&1
        rc=$?
        check "drop-commit-reply -M $m: pgbench fails (rc=$rc)" \
            eval '[ $rc != 0 ] && [ $rc != 124 ] && [ "$(stat_of commit_drops)" = $((drops + 1)) ]'
        check "drop-commit-reply -M $m: row committed" \
            test "$(q_direct -c "select count(*) from t where x = $x")" = 1
        x=$((x + 1))
    done
}

test_ttl_and_signal() {
    local pid rc
    "$bin" --listen 127.0.0.1:0 --upstream "127.0.0.1:$pg_port" \
        --control "$tmp/ttl.sock" --ttl 1 2>>"$tmp/proxy-ttl.log" &
    pid=$!; bg_pids+=("$pid")
    wait_pid "$pid" 5; rc=$?
    check "ttl: --ttl 1 exits by itself with 0 (rc=$rc)" \
        eval '[ $rc = 0 ] && [ ! -e "$tmp/ttl.sock" ]'
    "$bin" --listen 127.0.0.1:0 --upstream "127.0.0.1:$pg_port" \
        --control "$tmp/term.sock" --port-file "$tmp/term.port" \
        2>>"$tmp/proxy-term.log" &
    pid=$!; bg_pids+=("$pid")
    wait_until 5 test -s "$tmp/term.port"
    kill -TERM "$pid"
    wait_pid "$pid" 5; rc=$?
    check "signal: SIGTERM exits 0 and removes the control socket (rc=$rc)" \
        eval '[ $rc = 0 ] && [ ! -e "$tmp/term.sock" ]'
}

test_quit() {
    local rc out
    out=$(ctl quit)
    wait_pid "$proxy_pid" 5; rc=$?
    proxy_pid=
    check "quit: '$out', exit $rc" eval '[ "$out" = "ok bye" ] && [ $rc = 0 ]'
}

build
test_usage
start_postgres
start_proxy
test_control
test_pass
test_many
test_reset
test_refuse
test_blackhole
test_delay
test_drop_commit
test_drop_commit_extended
test_ttl_and_signal
test_quit
summary
