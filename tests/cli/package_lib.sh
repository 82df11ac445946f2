# shellcheck shell=bash
# package_lib.sh — helpers for the package tests (client.node.pack,
# client.python.pack, client.rust.pack): a client's artefact installed
# outside the tree, used directly and through PgBouncer.  Sourced after
# tests/cli/lib.sh (MODE direct: its database, $DB, is the direct one);
# adds a second database, $POOLED_DB, reached through the pooler, and the
# installing helpers of tests/cli/first_job/lib.sh (fj_*).
# shellcheck source=tests/cli/first_job/lib.sh
. "$SKL_SOURCE_DIR/tests/cli/first_job/lib.sh"
POOLED_DB=${DB}_pooled
admin -c "CREATE DATABASE \"$POOLED_DB\"" >/dev/null
trap 'cleanup; admin -c "DROP DATABASE IF EXISTS \"$POOLED_DB\" WITH (FORCE)" >/dev/null 2>&1' EXIT
SERVER="$SKL_TEST_DBUSER@$SKL_TEST_PGHOST"

qdb() { psql -X -q -At -v ON_ERROR_STOP=1 "postgresql://$SERVER:$SKL_TEST_PGPORT/$1" -c "$2"; }

# target MODE: sets db and url, the database and the URL an app of MODE
# (direct or pooled) uses.
target() {
	if [ "$1" = direct ]; then db=$DB; else db=$POOLED_DB; fi
	local port=$SKL_TEST_PGPORT
	[ "$1" = pooled ] && port=$SKL_TEST_BOUNCER_PORT
	# shellcheck disable=SC2034 # url is the caller's
	url="postgresql://$SERVER:$port/$db"
}

# installer_steps FILE: NSTEPS and NEWEST, the steps of the installed
# installer FILE, after checking it is the tree's sql/install.sql.
installer_steps() {
	cmp -s "$1" "$SKL_SOURCE_DIR/sql/install.sql" &&
		pass "the installed ${1##*/} is the tree's sql/install.sql" ||
		fail "the installed $1 differs from the tree's sql/install.sql"
	local steps
	steps=$(grep -E '^-- step [0-9]{4}_[a-z0-9_]+$' "$1")
	NSTEPS=$(wc -l <<<"$steps")
	NEWEST=$(tail -n 1 <<<"$steps" | sed 's/^-- step 0*\([0-9]*\)_.*/\1/')
}

# check_init LABEL LOG CMD...: CMD (the package's init command) succeeds and
# leaves $db at the newest step, one row per step.
check_init() {
	local label=$1 log=$2
	shift 2
	if "$@" >"$log" 2>&1; then pass "$label: $(cat "$log")"; else fail "$label: $(cat "$log")"; fi
	check_eq "$label: one row per step, at the newest" \
		"$(qdb "$db" "SELECT count(*) || '/' || count(DISTINCT version) || ' ' || skiplock.installed_version() FROM skiplock.schema_version")" \
		"$NSTEPS/$NSTEPS $NEWEST"
}

# only_on_path TOOL...: a directory, $TMP/path, holding only these tools.
only_on_path() {
	mkdir -p "$TMP/path"
	local t
	for t in "$@"; do ln -sf "$(command -v "$t")" "$TMP/path/$t"; done
}

# no_idle_in_tx LABEL: no session of $db is left idle in a transaction.
no_idle_in_tx() {
	check_eq "$1: no idle-in-transaction sessions" "$(qdb "$db" "SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'")" 0
}
