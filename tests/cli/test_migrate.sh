#!/usr/bin/env bash
# `skiplock migrate`: bad input exits 2 before anything is applied (also a
# FIFO, a symlink to /dev/zero or a file over 16 MiB named like a
# migration); status of an empty directory is clean under UBSan; a pooled
# URL without a direct one is refused (and --allow-pooler runs anyway);
# files apply in order and are recorded; a failing file leaves no partial
# schema and names file, line and server message; verify catches an edited
# or missing file but not a CRLF conversion; a session advisory lock leaked
# on a pooled backend on sqlx's migration key (the seed-004 incident) never
# blocks migrate.
. "$(dirname "$0")/lib.sh"

unset DIRECT_DATABASE_URL DATABASE_URL
# In pooled mode the URL is PgBouncer's and the direct endpoint is given.
if [ "$MODE" = pooled ]; then DIRECT=(--direct-url "$DIRECT_URL"); else DIRECT=(); fi
mig() { "$SKL_BIN" migrate "$1" --url "$URL" "${DIRECT[@]}" "${@:2}"; }
regclass() { q "SELECT coalesce(to_regclass('$1')::text, 'none')"; }
applied() { q "SELECT coalesce(string_agg(version::text, ',' ORDER BY version), '') FROM ${2:-skiplock.migrations}"; }
# run NAME CMD...: runs CMD, keeps stdout and stderr in $TMP/NAME.{out,err}, sets RC.
run() { local n=$1; shift; "$@" >"$TMP/$n.out" 2>"$TMP/$n.err"; RC=$?; }
has() { # DESCRIPTION FILE PATTERN
	if grep -qE -- "$3" "$2"; then pass "$1"; else fail "$1: /$3/ not in: $(head -c 600 "$2")"; fi
}

# --- bad input: exit 2, nothing applied (the same in both modes: run once) --
if [ "$MODE" = direct ]; then
D=$TMP/bad
mkdir -p "$D"
expect_exit "missing directory" 2 'migrations directory .*/nope does not exist' -- \
	mig up --dir "$TMP/nope"
expect_exit "no --dir" 2 '--dir is required' -- mig up
expect_exit "unknown subcommand" 2 'unknown subcommand "down"' -- "$SKL_BIN" migrate down
echo 'CREATE TABLE bad_a (id int);' >"$D/0001_a.sql"
echo 'CREATE TABLE bad_b (id int);' >"$D/0002-b.sql"
expect_exit "file name breaking the pattern" 2 '"0002-b.sql" does not match NNNN_name.sql' -- \
	mig up --dir "$D"
rm "$D/0002-b.sql"
echo 'CREATE TABLE bad_b (id int);' >"$D/1_b.sql"
expect_exit "duplicate versions" 2 '0001_a.sql and 1_b.sql have the same version 1' -- \
	mig up --dir "$D"
rm "$D/1_b.sql"
printf -- '-- skiplock:no-transactions\nCREATE TABLE bad_c (id int);\n' >"$D/0003_c.sql"
expect_exit "misspelt directive" 2 'unknown directive "-- skiplock:no-transactions"' -- \
	mig up --dir "$D"
rm "$D/0003_c.sql"
printf 'CREATE TABLE bad_d (id int);\n\ncommit;\n' >"$D/0004_d.sql"
expect_exit "transaction control in a file" 2 '0004_d.sql line 3: commit is not allowed' -- \
	mig up --dir "$D"
rm "$D/0004_d.sql"
expect_exit "bad --table" 2 'table "Bad-Name" must be NAME or SCHEMA.NAME' -- \
	mig up --dir "$D" --table Bad-Name
expect_exit "bad --lock-timeout" 2 '--lock-timeout: invalid duration "soon"' -- \
	mig up --dir "$D" --lock-timeout soon
check_eq "nothing applied after bad input" "$(regclass bad_a) $(regclass bad_d) $(regclass skiplock.migrations)" "none none none"

# --- pooled URL without a direct one ------------------------------------------
echo 'CREATE TABLE via_pooler (id int);' >"$D/0001_a.sql"
expect_exit "pooled URL refused" 2 'refusing to migrate through a connection pooler.*--direct-url' -- \
	"$SKL_BIN" migrate up --dir "$D" --url "$POOLED_URL" --pooler transaction
check_eq "nothing applied when refused" "$(regclass via_pooler)" none
run allow "$SKL_BIN" migrate up --dir "$D" --url "$POOLED_URL" --pooler transaction --allow-pooler \
	--table pooler_migrations
check_eq "--allow-pooler runs through the pooler" "$RC $(regclass via_pooler) $(applied x pooler_migrations)" "0 via_pooler 1"
has "--allow-pooler warns" "$TMP/allow.err" 'migrating through a pooler'
fi

# --- an empty directory, and files that are not regular files: refused
# before a byte is read, one line naming the file, exit 2 (both modes) ------
D=$TMP/empty
mkdir -p "$D"
run empty timeout 20 "$SKL_BIN" migrate status --dir "$D" --url "$URL" "${DIRECT[@]}" --table empty_migrations
check_eq "status of an empty directory: exit 0, no sanitizer report" \
	"$RC $(grep -c 'runtime error' "$TMP/empty.err")" "0 0"
D=$TMP/special
mkdir -p "$D"
echo 'CREATE TABLE special_a (id int);' >"$D/0001_a.sql"
mkfifo "$D/0002_fifo.sql"
expect_exit "a FIFO named like a migration" 2 'migration file .*/0002_fifo.sql: not a regular file' -- \
	timeout 20 "$SKL_BIN" migrate up --dir "$D" --url "$URL" "${DIRECT[@]}"
rm "$D/0002_fifo.sql"
ln -s /dev/zero "$D/0002_zero.sql"
expect_exit "a symlink to /dev/zero" 2 'migration file .*/0002_zero.sql: not a regular file' -- \
	timeout 20 "$SKL_BIN" migrate up --dir "$D" --url "$URL" "${DIRECT[@]}"
rm "$D/0002_zero.sql"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$D/0002_huge.sql"
expect_exit "a file over 16 MiB" 2 'migration file .*/0002_huge.sql: larger than the limit .*16 MiB' -- \
	timeout 20 "$SKL_BIN" migrate up --dir "$D" --url "$URL" "${DIRECT[@]}"
rm "$D/0002_huge.sql"
check_eq "nothing applied after a refused file" "$(regclass special_a) $(regclass skiplock.migrations)" "none none"
echo 'CREATE TABLE special_b (id int);' >"$TMP/linked.sql"
ln -s "$TMP/linked.sql" "$D/0002_linked.sql"
run linked mig up --dir "$D" --table special_migrations
check_eq "a symlink to a regular file is followed" "$RC $(regclass special_b) $(applied x special_migrations)" "0 special_b 1,2"

# --- apply, fail, verify ---------------------------------------------------
D=$TMP/m
mkdir -p "$D"
printf 'CREATE TABLE ta (id int PRIMARY KEY);\nINSERT INTO ta VALUES (1);\n' >"$D/0001_create.sql"
printf -- '-- skiplock:no-transaction\nCREATE INDEX CONCURRENTLY ta_id_idx ON ta (id);\n' >"$D/0002_index.sql"
cat >"$D/0003_bad.sql" <<'EOF'
CREATE TABLE partial (id int);
ALTER TABLE ta ADD COLUMN y int; -- a ';' in a comment
INSERT INTO ta VALUES (2);
SELECT 'text; with a semicolon',
       nope
  FROM ta;
EOF
run fail mig up --dir "$D"
check_eq "a failing file: exit 1" "$RC" 1
has "the error names file, line and server message" "$TMP/fail.err" \
	'0003_bad.sql line 5: column "nope" does not exist \(SQLSTATE 42703\)'
has "progress per file" "$TMP/fail.out" '^applied 0002_index.sql'
check_eq "no partial schema" "$(regclass partial) $(q "SELECT count(*) FROM information_schema.columns WHERE table_name = 'ta' AND column_name = 'y'") $(q 'SELECT count(*) FROM ta')" "none 0 1"
check_eq "applied set: 1 and 2" "$(applied)" "1,2"
check_eq "recorded: name, checksum, duration, applied_by" \
	"$(q "SELECT name || ' ' || length(checksum) || ' ' || (duration_ms >= 0) || ' ' || (applied_by LIKE '%:%:%') FROM skiplock.migrations WHERE version = 2")" \
	"index 64 true true"
check_eq "the checksum is the file's SHA-256" \
	"$(q "SELECT checksum FROM skiplock.migrations WHERE version = 1")" \
	"$(sha256sum <"$D/0001_create.sql" | cut -d' ' -f1)"
run status mig status --dir "$D"
has "status: applied and pending" "$TMP/status.out" '^ +3 +bad +pending'
run sjson mig status --dir "$D" --json
check_eq "status --json: states and the drift verdict" \
	"$RC $(jq -c '[.table, .drift, [.migrations[] | [.version, .name, .state, (.duration_ms != null)]]]' "$TMP/sjson.out")" \
	'0 ["skiplock.migrations",false,[[1,"create","applied",true],[2,"index","applied",true],[3,"bad","pending",false]]]'
run ujson mig up --dir "$D" --json
check_eq "up --json: exit 2, nothing applied" "$RC $(applied)" "2 1,2"
has "up --json says why" "$TMP/ujson.err" '--json applies to migrate status and verify, not up'
sed -i 's/^       nope$/       id/' "$D/0003_bad.sql"
run good mig up --dir "$D"
check_eq "fixed file applies" "$RC $(applied) $(q 'SELECT count(*) FROM ta')" "0 1,2,3 2"
run again mig up --dir "$D"
check_eq "a second run applies nothing" "$RC $(applied)" "0 1,2,3"
has "and says so" "$TMP/again.out" 'nothing to apply: 3 migrations already applied'

sed -i 's/$/\r/' "$D/0001_create.sql"
run crlf mig verify --dir "$D"
check_eq "verify: a CRLF conversion is no change" "$RC" 0
run crlf_up mig up --dir "$D"
check_eq "up after a CRLF conversion: nothing to do" "$RC $(applied)" "0 1,2,3"
echo '-- edited' >>"$D/0001_create.sql"
run edited mig verify --dir "$D"
check_eq "verify: an edited file exits 1" "$RC" 1
has "verify names it" "$TMP/edited.out" '^changed: version 1 \(create\)'
run vjson mig verify --dir "$D" --json
check_eq "verify --json: exit 1, drift, the changed one" \
	"$RC $(jq -c '[.drift, [.migrations[] | select(.state != "applied") | .version]]' "$TMP/vjson.out")" \
	'1 [true,[1]]'
run edited_up mig up --dir "$D"
check_eq "up refuses while an applied file changed" "$RC" 1
has "up says which" "$TMP/edited_up.err" '0001_create.sql was changed after it was applied'
sed -i '$d' "$D/0001_create.sql"
mv "$D/0002_index.sql" "$TMP/"
run missing mig verify --dir "$D"
check_eq "verify: a missing applied file exits 1" "$RC" 1
has "verify names the missing one" "$TMP/missing.out" '^missing: version 2 \(index\)'
mv "$TMP/0002_index.sql" "$D/"
run ok mig verify --dir "$D"
check_eq "verify passes again" "$RC" 0

# --- a failed CREATE INDEX CONCURRENTLY names the invalid index it left -----
D=$TMP/cic
mkdir -p "$D"
echo 'CREATE TABLE dup (x int); INSERT INTO dup VALUES (1), (1);' >"$D/0001_dup.sql"
printf -- '-- skiplock:no-transaction\nCREATE UNIQUE INDEX CONCURRENTLY dup_x ON dup (x);\n' >"$D/0002_unique.sql"
run cic mig up --dir "$D" --table cic_migrations
check_eq "a failed no-transaction file: exit 1, not recorded" "$RC $(applied x cic_migrations)" "1 1"
has "the invalid index is named with the fix" "$TMP/cic.err" \
	'0002_unique.sql line 2: could not create unique index "dup_x".*invalid index left behind: ([a-z]+\.)?dup_x; drop it'

# --- seed 004: a leaked session lock on sqlx's migration key ----------------
# sqlx: 0x3d32ad9e * CRC32(current_database()), in 64-bit arithmetic.
crc=$(printf %s "$DB" | gzip -c | tail -c8 | head -c4 | od -An -tu4 | tr -d ' ')
KEY=$((0x3d32ad9e * crc))
psql -X -q -At "$POOLED_URL" -c "SELECT pg_advisory_lock($KEY)" >/dev/null ||
	fail "taking the session lock through PgBouncer"
check_eq "the lock stays on a pooled backend after the client left" \
	"$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $KEY")" 1
D=$TMP/seed
mkdir -p "$D"
echo 'CREATE TABLE after_leak (id int);' >"$D/0001_after_leak.sql"
start=$SECONDS
run leak timeout 60 "$SKL_BIN" migrate up --dir "$D" --url "$URL" "${DIRECT[@]}" --table leak_migrations --max-wait 10s
check_eq "migrate is not blocked by the leaked lock" "$RC $(regclass after_leak)" "0 after_leak"
[ $((SECONDS - start)) -lt 30 ] && pass "and finished promptly" || fail "took $((SECONDS - start)) s"
check_eq "migrate took no advisory lock and left the leaked one alone" \
	"$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")" 1
q "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" >/dev/null

run help "$SKL_BIN" migrate up --help
check_eq "--help exits 0" "$RC" 0
has "--help is a man page" "$TMP/help.out" '^SYNOPSIS'

for _ in $(seq 50); do [ "$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")" = 0 ] && break; sleep 0.1; done
no_leftovers
finish
