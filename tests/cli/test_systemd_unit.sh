#!/usr/bin/env bash
# dist/systemd: the worker unit runs as a dynamic user with the usual
# hardening, starts the worker without a shell (its settings are
# SKIPLOCK_<OPTION> variables of the env file), and `systemd-analyze
# verify` accepts it.  systemd-analyze is
# part of the test set (scripts/bootstrap installs package systemd): a
# missing tool fails this test instead of skipping it.
. "$(dirname "$0")/lib.sh"
: "${SKL_SOURCE_DIR:?run under CTest}"
if ! command -v systemd-analyze >/dev/null; then
	fail "systemd-analyze is not installed (scripts/bootstrap installs package systemd)"
	finish
	exit
fi
mkdir -p "$TMP/units" "$TMP/man/man1"
unit=$TMP/units/skiplock-worker@.service
sed "s|@SKL_BINDIR@|$(dirname "$SKL_BIN")|" "$SKL_SOURCE_DIR/dist/systemd/skiplock-worker@.service.in" >"$unit"
cp "$SKL_SOURCE_DIR"/man/*.1 "$TMP/man/man1/"

for line in DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes \
	ProtectHome=yes PrivateDevices=yes RestrictSUIDSGID=yes CapabilityBoundingSet= \
	'StateDirectory=skiplock/%i' KillSignal=SIGTERM KillMode=mixed; do
	grep -qx -- "$line" "$unit" && pass "unit: $line" || fail "unit lacks $line"
done
check_eq "ExecStart runs the worker itself: no shell, no eval'd argument string" \
	"$(sed -n 's/^ExecStart=//p' "$unit")" "$(dirname "$SKL_BIN")/skiplock worker"
grep -q 'SKIPLOCK_WORKER_ARGS\|eval' "$unit" && fail "the unit still mentions an eval'd argument string" ||
	pass "the unit's settings are SKIPLOCK_<OPTION> variables"
MANPATH=$TMP/man systemd-analyze verify "$unit" >"$TMP/verify.log" 2>&1
check_eq "systemd-analyze verify" "$? $(head -c 300 "$TMP/verify.log")" "0 "
# the exposure score (0 best, 10 worst) of the sandbox as written
score=$(systemd-analyze security --offline=true "$unit" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 4.0) }'; then
	pass "systemd-analyze security: exposure $score (at most 4.0)"
else
	fail "systemd-analyze security: exposure '${score:-none}', want at most 4.0: $(systemd-analyze security --offline=true "$unit" 2>&1 | tail -3)"
fi
finish
