#!/usr/bin/env bash
# Install into a temporary prefix (what `make install PREFIX=…` runs): the
# command, the libraries, the headers, skiplock.pc naming that prefix, the
# man pages and the systemd unit template; a C program compiled with
# `pkg-config --cflags --libs skiplock` runs against the database; the
# unit's ExecStart line, given an env file, runs a worker that drains on
# SIGTERM; uninstall removes every file.
. "$(dirname "$0")/lib.sh"
: "${SKL_BUILD_DIR:?run under CTest}" "${SKL_SOURCE_DIR:?run under CTest}"
P=$TMP/prefix
# both modes install from the same build dir, whose install_manifest.txt
# is shared: one at a time, and keep a copy of ours
(
	flock 9
	cmake --install "$SKL_BUILD_DIR" --prefix "$P" >"$TMP/install.log" 2>&1 &&
		cp "$SKL_BUILD_DIR/install_manifest.txt" "$TMP/manifest"
) 9>"$SKL_BUILD_DIR/.install-test.lock"
check_eq "cmake --install succeeds" "$?" 0
pc=$(find "$P" -name skiplock.pc)
libdir=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir skiplock)
for f in bin/skiplock include/skiplock.h include/skiplock/worker.h share/man/man1/skiplock.1 \
	share/man/man1/skiplock-worker.1 "lib/systemd/system/skiplock-worker@.service" \
	"${libdir#"$P/"}/libskiplock.a" "${libdir#"$P/"}/libskiplock.so"; do
	[ -e "$P/$f" ] && pass "installed $f" || fail "not installed: $f ($(cat "$TMP/install.log" | tail -3))"
done
check_eq "skiplock.pc names the install prefix" "$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=prefix skiplock)" "$P"
for f in "$SKL_SOURCE_DIR"/man/*.1; do
	[ -e "$P/share/man/man1/$(basename "$f")" ] || fail "man page $(basename "$f") not installed"
done
check_eq "every man page installed" "$(ls "$P/share/man/man1" | wc -l)" "$(ls "$SKL_SOURCE_DIR"/man/*.1 | wc -l)"

# --- a 20-line C program through pkg-config ---
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror ${SKL_SANITIZE_FLAGS:-} $(pkg-config --cflags skiplock) \
	"$SKL_SOURCE_DIR/examples/install/hello.c" -o "$TMP/hello" \
	$(pkg-config --libs skiplock) -Wl,-rpath,"$libdir" 2>"$TMP/cc.log"
check_eq "hello.c compiles with pkg-config --cflags --libs skiplock" "$? $(head -c 300 "$TMP/cc.log")" "0 "
out=$("$TMP/hello" "$URL" 2>&1)
version=$(sed -n 's/^project(skiplock VERSION \([0-9.]*\).*/\1/p' "$SKL_SOURCE_DIR/CMakeLists.txt")
check_eq "hello runs against the database" "$(sed 's/job [0-9]*/job N/' <<<"$out")" "skiplock $version: job N completed"
check_eq "hello's job is completed in SQL" "$(q "SELECT state || ' ' || (payload->>'from') FROM skiplock.all_jobs WHERE kind = 'hello'")" "completed C"
ldd "$TMP/hello" | grep -q "$libdir/libskiplock.so" && pass "hello uses the installed libskiplock.so" || fail "hello does not link the installed library: $(ldd "$TMP/hello" | grep skiplock)"

# --- the systemd unit template ---
unit="$P/lib/systemd/system/skiplock-worker@.service"
for line in 'EnvironmentFile=/etc/skiplock/%i.env' 'KillSignal=SIGTERM' 'Restart=on-failure'; do
	grep -qx -- "$line" "$unit" && pass "unit: $line" || fail "unit lacks $line"
done
exec_line=$(sed -n 's/^ExecStart=//p' "$unit")
check_eq "the unit runs the installed binary's worker, no shell, no eval" "$exec_line" "$P/bin/skiplock worker"
# the settings as the unit's header shows them: one SKIPLOCK_<OPTION> per
# option, a repeated one on separate lines inside quotes, taken as written
cat >"$TMP/unit.env" <<ENV
DATABASE_URL=$URL
SKIPLOCK_HANDLER='note=cat > "$TMP/note.\$SKIPLOCK_JOB_ID"
other=cat > "$TMP/other.\$SKIPLOCK_JOB_ID"'
SKIPLOCK_POLL=50ms
ENV
id=$("$P/bin/skiplock" enqueue --url "$URL" note '{"n": 1}')
id2=$("$P/bin/skiplock" enqueue --url "$URL" other '{"n": 2}')
# shellcheck disable=SC2086  # ExecStart's words, as systemd splits them
(set -a; . "$TMP/unit.env"; exec $exec_line) 2>"$TMP/unit.log" &
W=$!
for _ in $(seq 1 300); do
	[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($id, $id2) AND state = 'completed'")" = 2 ] && break
	kill -0 $W 2>/dev/null || break
	sleep 0.1
done
check_eq "the unit's worker ran the job (handler from SKIPLOCK_HANDLER, quotes kept)" "$(cat "$TMP/note.$id" 2>/dev/null)" '{"n": 1}'
check_eq "the second line of SKIPLOCK_HANDLER is a second handler" "$(cat "$TMP/other.$id2" 2>/dev/null)" '{"n": 2}'
[ -s "$TMP/note.$id" ] || echo "worker log: $(cat "$TMP/unit.log")"
kill -TERM $W
wait $W
check_eq "SIGTERM: the unit's worker drains and exits 0" "$?" 0
if command -v systemd-analyze >/dev/null; then
	MANPATH=$P/share/man systemd-analyze verify "$unit" >"$TMP/verify.log" 2>&1
	check_eq "systemd-analyze verify" "$? $(grep -v 'No such file\|Failed to prepare' "$TMP/verify.log" | head -c 300)" "0 "
fi

# --- uninstall ---
cmake -DMANIFEST="$TMP/manifest" -P "$SKL_SOURCE_DIR/cmake/uninstall.cmake" >/dev/null
check_eq "uninstall removes every installed file" "$(find "$P" -type f -o -type l | head -5)" ""
no_leftovers
finish
