#!/usr/bin/env bash
# The conf.* handlers of ../README.md as one command handler: the kind is $1,
# the job's payload is on stdin, the job in SKIPLOCK_* variables.  Exit 0
# completes (stdout is the result), 75 retries, 65 discards, 1 fails.
set -u
kind=$1
payload=$(cat)
attempt=$SKIPLOCK_ATTEMPT

# field NAME: the integer payload field NAME (the payload is flat JSON).
field() { printf '%s' "$payload" | sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p"; }
nap() { sleep "$(awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }')"; }
# The fenced effect, then the result; a refused effect fails the attempt.
complete() {
	psql -X -q -At -v ON_ERROR_STOP=1 -v id="$SKIPLOCK_JOB_ID" -v fencing="$SKIPLOCK_FENCING" \
		-v owner="$CONFORMANCE_OWNER" -v payload="$payload" "$DATABASE_URL" >/dev/null <<-'SQL' || exit 1
		SELECT conformance.effect(:id, :fencing, :'owner', :'payload');
	SQL
	printf '{"kind": "%s", "attempt": %s}\n' "$kind" "$attempt"
	exit 0
}
case $kind in
conf.ok) complete ;;
conf.retry)
	[ "$attempt" -ge "$(field until)" ] && complete
	echo "conf.retry attempt $attempt" >&2
	exit 75 ;;
conf.fail) echo "conf.fail attempt $attempt" >&2; exit 1 ;;
conf.discard) echo "conf.discard attempt $attempt" >&2; exit 65 ;;
conf.sleep) nap "$(field ms)"; complete ;;
conf.hang)
	[ "$attempt" = 1 ] || complete
	nap "$(field ms)"
	printf '{"kind": "%s", "attempt": %s}\n' "$kind" "$attempt" ;;
*) echo "no handler for $kind" >&2; exit 1 ;;
esac
