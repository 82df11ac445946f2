#!/usr/bin/env bash
# The README's "Quick start for your app" runs as written: every fenced
# block marked `sh quickstart` runs in order (with DATABASE_URL set to the
# test's database, `skiplock` the command under test, in an empty
# directory), every `sh quickstart-background` block is started in the
# background and stopped with SIGTERM at the end, and a block that follows
# a background one is retried until it succeeds (the service needs a moment
# to start and do its work), up to 30 s.  Ports the blocks name are
# replaced by free ones, since both modes run at once.  The install block
# (`sh quickstart-install`) is run by package_deb.sh.  Then: the order and
# its job committed together, the job is completed with the handler's
# result, the dashboard answers, and both services stop on SIGTERM.
. "$(dirname "$0")/lib.sh"
: "${SKL_SOURCE_DIR:?run under CTest}"
README=$SKL_SOURCE_DIR/README.md

# blocks: "KIND<TAB>text with \n escaped", one per line, in README order
awk '/^```sh quickstart(-background)?$/ {kind = $2; text = ""; next}
	kind && /^```$/ {gsub(/\\/, "\\\\", text); print kind "\t" text; kind = ""; next}
	kind {text = text $0 "\\n"}' "$README" >"$TMP/blocks"
n_run=$(grep -c '^quickstart	' "$TMP/blocks")
n_bg=$(grep -c '^quickstart-background	' "$TMP/blocks")
[ "$n_run" -ge 4 ] && [ "$n_bg" -ge 2 ] && pass "quick start: $n_run blocks to run, $n_bg in the background" ||
	fail "quick start blocks: $n_run to run, $n_bg in the background (want >= 4 and >= 2)"

# A port below the kernel's range of ephemeral ports (a connection's own
# port there made a listener fail with "Address already in use") that no
# socket uses, listening or not.
free_port() {
	local p lo
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range && [ "$lo" -gt 11000 ] || lo=32768
	while :; do
		p=$((10000 + RANDOM % (lo - 10000)))
		ss -Htan "sport = :$p" | grep -q . || { echo "$p"; return; }
	done
}
declare -A PORTS
mkdir -p "$TMP/bin" "$TMP/app"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$SKL_BIN" >"$TMP/bin/skiplock"
chmod +x "$TMP/bin/skiplock"
export PATH="$TMP/bin:$PATH" DATABASE_URL=$URL
BG=()
after_bg=false
i=0
while IFS=$'\t' read -r kind text; do
	i=$((i + 1))
	block=$(printf '%b' "$text")
	for p in $(grep -oE '127\.0\.0\.1:[0-9]+' <<<"$block" | cut -d: -f2 | sort -u); do
		[ -n "${PORTS[$p]:-}" ] || PORTS[$p]=$(free_port)
		block=${block//127.0.0.1:$p/127.0.0.1:${PORTS[$p]}}
	done
	if [ "$kind" = quickstart-background ]; then
		(cd "$TMP/app" && exec bash -c "exec $block") >"$TMP/bg$i.out" 2>"$TMP/bg$i.err" &
		BG+=($!)
		after_bg=true
		pass "block $i started in the background: $block"
		continue
	fi
	end=$((SECONDS + 30))
	while :; do
		(cd "$TMP/app" && bash -e -o pipefail -c "$block") >"$TMP/run$i.out" 2>"$TMP/run$i.err"
		rc=$?
		[ "$rc" = 0 ] || ! $after_bg || [ "$SECONDS" -ge "$end" ] && break
		sleep 0.2
	done
	check_eq "block $i runs: $(head -1 <<<"$block")" "$rc $( [ "$rc" = 0 ] || head -c 300 "$TMP/run$i.err")" "0 "
	echo "--- block $i output:"
	cat "$TMP/run$i.out"
done <"$TMP/blocks"

check_eq "the order and its job committed together" \
	"$(q "SELECT count(*) FROM orders o JOIN skiplock.all_jobs j ON j.payload->>'order' = o.id::text WHERE j.kind = 'email' AND j.queue = 'mail'")" 1
check_eq "the job is completed" "$(q "SELECT state FROM skiplock.all_jobs WHERE kind = 'email'")" completed
check_eq "the handler got the payload (its stdout is the job's result)" \
	"$(q "SELECT result::text FROM skiplock.all_jobs WHERE kind = 'email'")" '{"sent": {"order": 42}}'
dash=${PORTS[8080]:-}
[ -n "$dash" ] && curl -sf "http://127.0.0.1:$dash/" | grep -qi '<html' &&
	pass "the dashboard answers on the README's address (port $dash here)" ||
	fail "the dashboard does not answer on port ${dash:-none}: $(head -c 300 "$TMP"/bg*.err)"
for pid in "${BG[@]}"; do
	kill -TERM "$pid" 2>/dev/null
	wait_exit "$pid" 30
	check_eq "background block (pid $pid) stops on SIGTERM with exit 0" "$RC" 0
done
[ "$FAILS" = 0 ] || tail -n 20 "$TMP"/bg*.err
no_leftovers
finish
