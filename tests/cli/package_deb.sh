#!/usr/bin/env bash
# tests/cli/package_deb.sh — registered once (package.deb), not per mode.
#
# 1. `make` builds in a fresh directory with only the build dependencies:
#    every file of the packages that only the demo and the tests need
#    (scripts/bootstrap --list --test, less --deb, with their dependencies)
#    is hidden from PATH and from pkg-config by shadow directories of links.
# 2. The README's install commands (`make deb`, `dpkg -i`) build the Debian
#    package there and install it; its Depends names the package of every
#    library the binaries need.
# 3. From the installed files only: `skiplock --version`, `skiplock init`, a
#    worker directly and through PgBouncer, the systemd unit's ExecStart,
#    and a C program built with the installed skiplock.pc.
# 4. `dpkg -r` leaves none of the files `dpkg -L` listed, and no
#    configuration files (the purge then drops dpkg's record).
# Needs root (dpkg -i): skipped (77) otherwise.
. "$(dirname "$0")/lib.sh"
: "${SKL_SOURCE_DIR:?run under CTest}"
SRC=$SKL_SOURCE_DIR
VERSION=$(sed -n 's/^project(skiplock VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
if [ "$(id -u)" != 0 ]; then
	echo "package_deb: skipped: installing a package needs root"
	exit 77
fi
if dpkg-query -W -f='${db:Status-Status}' skiplock 2>/dev/null | grep -qx installed; then
	fail "a skiplock package is installed already: remove it (dpkg -r skiplock) first"
	finish
	exit 1
fi
INSTALLED=false
pkg_cleanup() { $INSTALLED && dpkg --purge skiplock >/dev/null 2>&1; cleanup; }
trap pkg_cleanup EXIT

# --- 1. the build set only ---
closure() { # packages... -> installed packages they need, recursively
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
		--no-replaces --no-enhances "$@" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u
}
"$SRC/scripts/bootstrap" --list --deb | sort -u >"$TMP/build-set"
"$SRC/scripts/bootstrap" --list --test | sort -u | comm -23 - "$TMP/build-set" >"$TMP/test-only"
mapfile -t build_set <"$TMP/build-set"
mapfile -t test_only <"$TMP/test-only"
{
	closure "${build_set[@]}"
	dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' | awk '$2 == "yes" || $3 == "required" {print $1}'
} | sort -u >"$TMP/keep"
closure "${test_only[@]}" | comm -23 - "$TMP/keep" >"$TMP/hide"
xargs -r dpkg -L <"$TMP/hide" 2>/dev/null | sort -u >"$TMP/hidden-files"
shadow() { # DIR SOURCE_DIRS...: links to the files of SOURCE_DIRS that are not hidden
	local out=$1 d f
	shift
	mkdir -p "$out"
	for d in "$@"; do
		for f in "$d"/*; do [ -f "$f" ] && printf '%s\n' "$f"; done
	done >"$TMP/cand"
	xargs -r -d '\n' realpath -m -- <"$TMP/cand" | paste "$TMP/cand" - |
		awk -F'\t' 'NR == FNR {h[$0] = 1; next} !($1 in h) && !($2 in h) {print $1}' \
			"$TMP/hidden-files" - | while read -r f; do
		[ -e "$out/${f##*/}" ] || ln -s "$f" "$out/${f##*/}"
	done
}
IFS=: read -ra path_dirs <<<"$PATH"
shadow "$TMP/bin" "${path_dirs[@]}"
IFS=: read -ra pc_dirs <<<"$(pkg-config --variable pc_path pkg-config)"
shadow "$TMP/pc" "${pc_dirs[@]}"
clean_env=(env -i HOME="$TMP" LANG=C.UTF-8 PATH="$TMP/bin" PKG_CONFIG_LIBDIR="$TMP/pc")
for tool in node nodejs chromium chromedriver pgbouncer clang clang-14 faketime jq curl; do
	"${clean_env[@]}" sh -c "command -v $tool" >/dev/null &&
		fail "hidden from PATH: $tool is still found" || pass "hidden from PATH: $tool"
done
"${clean_env[@]}" pkg-config --exists cmocka && fail "cmocka still found by pkg-config" ||
	pass "hidden from pkg-config: cmocka"
for tool in cc cmake make pkg-config dpkg-shlibdeps; do
	"${clean_env[@]}" sh -c "command -v $tool" >/dev/null && pass "build tool present: $tool" ||
		fail "build tool hidden: $tool (in scripts/bootstrap --build?)"
done

B=$TMP/release
"${clean_env[@]}" make -C "$SRC" BUILD="$B" JOBS=2 >"$TMP/make.log" 2>&1
check_eq "make in a fresh directory with only the build set" \
	"$? $(grep -m3 -E ' error: |\*\*\*|CMake Error|not found' "$TMP/make.log")" "0 "
[ -x "$B/skiplock" ] && [ ! -d "$B/tests" ] && pass "the command is built, the tests are not (no cmocka)" ||
	fail "after make: skiplock $(ls "$B/skiplock" 2>&1), tests dir $(ls -d "$B/tests" 2>&1)"
# every library the configure step found belongs to a package of the build set
for lib in $(sed -n 's/^pkgcfg_lib_[A-Z]*_[a-z0-9]*:FILEPATH=//p' "$B/CMakeCache.txt" | sort -u); do
	p=$(dpkg -S "$(realpath "$lib")" 2>/dev/null | head -1 | cut -d: -f1)
	[ -z "$p" ] && p=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1)
	grep -qx "$p" "$TMP/keep" && pass "build links $lib (from $p, build set)" ||
		fail "build links $lib from '$p', which scripts/bootstrap --build does not install"
done

# --- 2. the README's install commands ---
install_cmds=$(awk '/^```sh quickstart-install$/ {on = 1; next} /^```/ {on = 0} on' "$SRC/README.md")
grep -q 'make deb' <<<"$install_cmds" && grep -q 'dpkg -i' <<<"$install_cmds" &&
	pass "README's install block: make deb, dpkg -i" || fail "README has no quickstart-install block with make deb and dpkg -i: '$install_cmds'"
(
	cd "$SRC" || exit 1
	make() { "${clean_env[@]}" make BUILD="$B" JOBS=2 "$@"; }
	sudo() { "$@"; }
	eval "${install_cmds//build\/release\//$B/}"
) >"$TMP/install.log" 2>&1
check_eq "the README's install commands succeed" "$? $(tail -2 "$TMP/install.log" | grep -iE 'error|fail')" "0 "
dpkg-query -W -f='${db:Status-Status}' skiplock 2>/dev/null | grep -qx installed && INSTALLED=true
check_eq "dpkg -i installed the package" "$INSTALLED" true
deb=$(ls "$B"/skiplock_*.deb 2>/dev/null | head -1)
dpkg -c "$deb" >"$TMP/contents" && echo "dpkg -c $(basename "$deb"):" && cat "$TMP/contents"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for bin in /usr/bin/skiplock /usr/lib/*/libskiplock.so.0; do
	for soname in $(objdump -p "$bin" | awk '$1 == "NEEDED" {print $2}'); do
		p=$(dpkg -S "$soname" 2>/dev/null | grep -v '^skiplock' | grep -v -- '-dev' | head -1 | cut -d: -f1)
		[[ ", $depends" == *", $p "* || ", $depends" == *", $p," ]] &&
			pass "Depends names $p (${bin##*/} needs $soname)" ||
			fail "Depends '$depends' lacks $p (${bin##*/} needs $soname)"
	done
done
dpkg -L skiplock >"$TMP/listed"
for f in /usr/bin/skiplock /usr/include/skiplock.h /usr/include/skiplock/worker.h \
	/usr/share/man/man1/skiplock.1 /usr/share/man/man1/skiplock-worker.1 \
	/usr/lib/systemd/system/skiplock-worker@.service /usr/share/doc/skiplock/LICENSE; do
	grep -qx "$f" "$TMP/listed" && [ -e "$f" ] && pass "installed $f" || fail "not installed: $f"
done
check_eq "every man page installed" "$(grep -c '^/usr/share/man/man1/.*\.1$' "$TMP/listed")" "$(ls "$SRC"/man/*.1 | wc -l)"

# --- 3. from the installed files only ---
export PATH="/usr/sbin:/usr/bin:/sbin:/bin"
unset PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
check_eq "skiplock --version" "$(/usr/bin/skiplock --version | cut -d' ' -f1-2)" "skiplock $VERSION"
check_eq "skiplock init" "$(skiplock init --url "$DIRECT_URL" 2>&1 | grep -c '^skiplock schema installed: version')" 1
run_worker() { # URL KIND: one job through the installed worker
	local id w
	id=$(skiplock enqueue --url "$1" "$2" '{"n": 1}')
	skiplock worker --url "$1" --handler "$2=cat > $TMP/$2.out" --poll 50ms 2>"$TMP/$2.log" &
	w=$!
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = ${id:-0}" completed 30
	check_eq "installed worker ran a job ($2)" "$(cat "$TMP/$2.out" 2>/dev/null)" '{"n": 1}'
	kill -TERM $w
	wait_exit $w 30
	check_eq "installed worker drains on SIGTERM ($2)" "$RC" 0
}
run_worker "$DIRECT_URL" direct
run_worker "$POOLED_URL" pooled
unit=/usr/lib/systemd/system/skiplock-worker@.service
grep -qx 'ExecStart=/usr/bin/skiplock worker' "$unit" && pass "the unit runs /usr/bin/skiplock worker, no shell" ||
	fail "the unit's ExecStart: $(grep ExecStart "$unit")"
pc=$(ls /usr/lib/*/pkgconfig/skiplock.pc)
grep -qx 'License: MIT' "$pc" && pass "skiplock.pc: License: MIT" || fail "skiplock.pc has no License: MIT"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror $(pkg-config --cflags skiplock) "$SRC/examples/install/hello.c" \
	-o "$TMP/hello" $(pkg-config --libs skiplock) 2>"$TMP/cc.log"
check_eq "hello.c builds with the installed skiplock.pc" "$? $(head -c 300 "$TMP/cc.log")" "0 "
check_eq "hello runs with the installed library" \
	"$("$TMP/hello" "$DIRECT_URL" 2>&1 | sed 's/job [0-9]*/job N/')" "skiplock $VERSION: job N completed"
ldd "$TMP/hello" | grep -qE "=> (/usr)?/lib/[^ ]*/libskiplock.so.0 " && pass "hello uses the installed libskiplock.so.0" ||
	fail "hello links: $(ldd "$TMP/hello" | grep skiplock)"

# --- 4. removal ---
dpkg -r skiplock >"$TMP/remove.log" 2>&1
check_eq "dpkg -r skiplock" "$? $(grep -i error "$TMP/remove.log")" "0 "
INSTALLED=false
left=$(while read -r f; do [ -e "$f" ] && [ ! -d "$f" ] && echo "$f"; done <"$TMP/listed")
check_eq "dpkg -r removed every listed file" "$left" ""
check_eq "skiplock's own directories are gone" \
	"$(ls -d /usr/include/skiplock /usr/share/doc/skiplock 2>/dev/null)" ""
# the package has a postrm (ldconfig), so dpkg keeps its record until a
# purge; it owns no configuration files, so there is nothing else to keep
check_eq "dpkg -r kept no configuration files" "$(dpkg-query -W -f='${Conffiles}' skiplock 2>/dev/null)" ""
dpkg --purge skiplock >/dev/null 2>&1
status=$(dpkg-query -W -f='${db:Status-Status}' skiplock 2>/dev/null)
check_eq "after dpkg --purge dpkg has no record of it" "${status:-not-installed}" "not-installed"
ldconfig -p | grep -q libskiplock && fail "ldconfig still lists libskiplock" || pass "ldconfig no longer lists libskiplock"
no_leftovers
finish
