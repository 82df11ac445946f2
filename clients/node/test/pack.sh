#!/usr/bin/env bash
# pack.sh — the package as an app installs it (CTest: client.node.pack).
#
# `npm pack` in clients/node (scripts/dist node, as `make dist` runs it);
# the tarball holds src, bin, index.d.ts, index.d.cts and sql/install.sql,
# and nothing of the tests.  It is
# installed with pg into an app outside the tree, offline (no registry: pg
# and its dependencies are packed from this client's node_modules, the
# npm cache is empty).  Then, with no C binary on PATH, on an empty
# database directly and another through PgBouncer (transaction mode):
#   * `npx skiplock init --url …` installs the schema (one row per step);
#   * examples/quick-start.mjs (import) and examples/quick-start.cjs
#     (require; it runs init() itself) each complete a job with its result
#     and discard a failing one, whose stack is on the app's stderr; both
#     stop on SIGTERM with exit 0; no idle-in-transaction session is left;
#   * the first-job app (tests/cli/first_job/app.mjs, what bench/first-job
#     times) enqueues a job in its transaction, a worker completes it;
# require('skiplock') and import('skiplock') are the same module; tsc
# type-checks a typed app (test/pack/typed-app.*), ESM and CommonJS,
# against the installed types.
HERE=$(cd "$(dirname "$0")/.." && pwd)
bash "$HERE/test/ensure-deps.sh" || exit 1
set -- direct
. "${SKL_SOURCE_DIR:?run under CTest}/tests/cli/lib.sh"
. "$SKL_SOURCE_DIR/tests/cli/package_lib.sh"
APP=$TMP/app
fj_npm_offline "$TMP/npm-cache"

# the tarball, and what it holds
tarball=$("$SKL_SOURCE_DIR/scripts/dist" --out "$TMP" node) || fail "scripts/dist node"
tarball=${tarball##*/}
listing=$(tar -tzf "$TMP/$tarball")
for f in src/index.js src/init.js bin/skiplock.js index.d.ts index.d.cts sql/install.sql package.json; do
	grep -qx "package/$f" <<<"$listing" && pass "the tarball holds $f" || fail "the tarball has no $f"
done
check_eq "the tarball holds no tests, examples or node_modules" \
	"$(grep -cE '^package/(test|examples|node_modules|bench)/' <<<"$listing")" 0

# the app: the tarball and pg, from files only
mkdir -p "$APP"
echo '{ "name": "quick-start-app", "private": true }' >"$APP/package.json"
fj_node_deps "$TMP/deps" || fail "packing pg and its dependencies"
if fj_node_app "$APP" "$TMP/$tarball" "$TMP/deps" >"$TMP/install.log" 2>&1; then
	pass "npm install of the tarball and pg, offline, into $APP"
else
	fail "npm install: $(cat "$TMP/install.log")"
fi
installer_steps "$APP/node_modules/skiplock/sql/install.sql"
cp "$HERE/examples/quick-start.mjs" "$HERE/examples/quick-start.cjs" "$HERE"/test/pack/typed-app.?ts "$APP/"

# PATH: node, npm, npx and sh (npm runs bins through it) only
only_on_path node npm npx sh
in_app() { (cd "$APP" && env PATH="$TMP/path" "$@"); }
check_eq "no skiplock on PATH but the package's" \
	"$(in_app npx -c 'command -v skiplock')" "$APP/node_modules/.bin/skiplock"

# run_app FILE URL: starts the app; sets APP_PID; its output in $TMP/FILE.{out,err}
run_app() {
	(cd "$APP" && exec env PATH="$TMP/path" DATABASE_URL="$2" node "$1") >"$TMP/$1.out" 2>"$TMP/$1.err" &
	APP_PID=$!
}

# quick_start FILE DB URL N: the app completes its welcome mail and discards
# its report (the Nth of each in DB), logs the report's stack, stops on SIGTERM.
quick_start() {
	local file=$1 db=$2 url=$3 n=$4 label="$1 [$5]"
	run_app "$file" "$url"
	local done="SELECT count(*) FILTER (WHERE kind = 'email.welcome' AND state = 'completed' AND result = '{\"sent\": true}')
	                 || '/' || count(*) FILTER (WHERE kind = 'report.build' AND state = 'discarded') FROM skiplock.all_jobs"
	local _
	for _ in $(seq 1 150); do
		[ "$(qdb "$db" "$done")" = "$n/$n" ] && break
		kill -0 "$APP_PID" 2>/dev/null || break
		sleep 0.1
	done
	check_eq "$label: the welcome mail completed with its result, the report discarded" "$(qdb "$db" "$done")" "$n/$n"
	wait_until "$label: its stack on stderr" 10 grep -q "at .*$file:[0-9]" "$TMP/$file.err" &&
		pass "$label: the report's stack on stderr"
	if grep -q "job [0-9]* (report.build) attempt 1 of 1 failed (its last attempt): Error: the report service is down" \
		"$TMP/$file.err"; then
		pass "$label: the failure logged"
	else
		fail "$label: the failure not logged: $(head -c 600 "$TMP/$file.err")"
	fi
	grep -q 'welcome mail to ' "$TMP/$file.out" && pass "$label: the handler ran" || fail "$label: no handler output"
	kill -TERM "$APP_PID"
	wait_exit "$APP_PID" 15
	check_eq "$label: exit status after SIGTERM" "$RC" 0
}

for mode in direct pooled; do
	target "$mode"
	check_init "npx skiplock init [$mode]" "$TMP/init.out" in_app npx skiplock init --url "$url"
	quick_start quick-start.mjs "$db" "$url" 1 "$mode"
	quick_start quick-start.cjs "$db" "$url" 2 "$mode"
	grep -qx "schema at step $NEWEST" "$TMP/quick-start.cjs.out" &&
		pass "quick-start.cjs [$mode]: init() from require" || fail "quick-start.cjs [$mode]: $(cat "$TMP/quick-start.cjs.out")"
	if (export DATABASE_URL=$url; in_app node app.mjs) >"$TMP/app.out" 2>&1; then
		pass "app.mjs [$mode]: $(tail -n 1 "$TMP/app.out")"
	else
		fail "app.mjs [$mode]: $(tail -n 20 "$TMP/app.out")"
	fi
	check_eq "app.mjs [$mode]: the job completed with its result" \
		"$(qdb "$db" "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'greet' AND state = 'completed'
			AND result = '{\"greeted\": \"a new user\"}'")" 1
	no_idle_in_tx "[$mode]"
done

same="const a = require('skiplock'); import('skiplock').then((b) => { if (a.Worker !== b.Worker || a.init !== b.init) process.exit(1); })"
in_app node -e "$same" 2>"$TMP/same.err" && pass "require('skiplock') is import('skiplock')" ||
	fail "require and import give different modules: $(cat "$TMP/same.err")"

# the types, ESM and CommonJS, with the tree's tsc and @types/node
cat >"$APP/tsconfig.json" <<EOF
{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
    "strict": true, "noEmit": true, "allowJs": true, "checkJs": true, "skipLibCheck": false,
    "typeRoots": ["$HERE/node_modules/@types"], "types": ["node"]
  },
  "files": ["typed-app.mts", "typed-app.cts"]
}
EOF
if (cd "$APP" && "$HERE/node_modules/.bin/tsc" -p . --listFiles) >"$TMP/tsc.out" 2>&1 &&
	grep -q 'node_modules/skiplock/index.d.cts$' "$TMP/tsc.out" && grep -q 'node_modules/skiplock/index.d.ts$' "$TMP/tsc.out"; then
	pass "tsc: the typed apps check against index.d.ts (import) and index.d.cts (require)"
else
	fail "tsc: $(grep -v '^/' "$TMP/tsc.out" | head -20)"
fi
MODE="direct and pooled"
finish
