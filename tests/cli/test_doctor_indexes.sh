#!/usr/bin/env bash
# `skiplock doctor indexes`: a clean database (skiplock's schema only) has no
# findings and exits 0; then an unused index, an invalid index left by a
# CREATE UNIQUE INDEX CONCURRENTLY that failed on a duplicate key, a
# redundant prefix index, a table of 100,000 rows never analyzed and a table
# autovacuum is not cleaning are each found with their fix, and it exits 1.
. "$(dirname "$0")/lib.sh"

S=$SKL_BIN
# json_q DOC SQL: SQL sees the document as :'doc'.
json_q() { printf '%s\n' "$2" | psql -X -q -At -v ON_ERROR_STOP=1 -v doc="$1" "$DIRECT_URL" 2>&1; }

"$S" init --url "$URL" >/dev/null || fail "init"
out=$("$S" doctor indexes --url "$URL"); rc=$?
check_eq "clean database: exit 0" "$rc" 0
grep -q '^no findings' <<<"$out" && pass "clean database: no findings" || fail "clean: $out"
doc=$("$S" doctor indexes --url "$URL" --json)
check_eq "clean database: --json has no findings" \
	"$(json_q "$doc" "SELECT json_array_length(:'doc'::json -> 'findings')")" 0

# The hazards.  autovacuum is off on the tables so that it cannot analyze or
# vacuum them while the test looks.
q "CREATE TABLE public.big (id int, v int, s text) WITH (autovacuum_enabled = off);
   INSERT INTO public.big SELECT g, g % 1000, 'row ' || g FROM generate_series(1, 100000) g;
   CREATE INDEX big_id_idx ON public.big (id);
   CREATE INDEX big_v_idx ON public.big (v);
   CREATE INDEX big_v_id_idx ON public.big (v, id);
   CREATE TABLE public.dup (k int) WITH (autovacuum_enabled = off);
   INSERT INTO public.dup VALUES (1), (1);
   CREATE TABLE public.churn (id int) WITH (autovacuum_enabled = off);
   INSERT INTO public.churn SELECT generate_series(1, 5000);
   DELETE FROM public.churn WHERE id <= 3000;" || fail "setup"
q "CREATE UNIQUE INDEX CONCURRENTLY dup_k_idx ON public.dup (k)" 2>/dev/null && fail "CIC should fail"
check_eq "the failed CIC left an invalid index" \
	"$(q "SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.dup_k_idx'::regclass")" f
# statistics reach the views asynchronously: wait (bounded) until they show
t0=$SECONDS
for _ in $(seq 1 300); do
	[ "$(q "SELECT count(*) FROM pg_stat_user_tables WHERE (relid = 'public.big'::regclass AND n_mod_since_analyze >= 100000)
	                                                   OR (relid = 'public.churn'::regclass AND n_dead_tup >= 3000)")" = 2 ] && break
	sleep 0.1
done
echo "statistics visible after $((SECONDS - t0)) s"

"$S" doctor indexes --url "$URL" >"$TMP/table"; rc=$?
check_eq "findings: exit 1" "$rc" 1
cat "$TMP/table"
grep -q '^Fixes, in order:' "$TMP/table" && grep -q '^  ANALYZE public.big;' "$TMP/table" &&
	grep -q '^invalid-index  *action  *public.dup_k_idx ' "$TMP/table" && pass "the table and its fixes" ||
	fail "table: $(cat "$TMP/table")"
doc=$("$S" doctor indexes --url "$URL" --json); rc=$?
check_eq "--json: exit 1" "$rc" 1
# every expected finding, in one query: "check object" of those present
found=$(json_q "$doc" "SELECT string_agg(f ->> 'check' || ' ' || (f ->> 'object'), ',' ORDER BY 1)
                        FROM json_array_elements(:'doc'::json -> 'findings') f
                       WHERE (f ->> 'action')::bool AND f ->> 'fix' <> '' AND f ->> 'detail' <> ''")
echo "found: $found"
for want in "unused-index public.big_id_idx" "invalid-index public.dup_k_idx" \
            "redundant-index public.big_v_idx" "stale-stats public.big" "dead-tuples public.churn"; do
	[[ ",$found," == *",$want,"* ]] && pass "found: $want" || fail "not found: $want"
done
[[ ",$found," != *",redundant-index public.big_v_id_idx,"* ]] && pass "the wider index is not redundant" ||
	fail "the wider index was called redundant"
[[ ",$found," != *" skiplock."* ]] && pass "nothing from skiplock's own schema" || fail "skiplock's schema: $found"
fixes=$(json_q "$doc" "SELECT string_agg(f ->> 'fix', '|' ORDER BY f ->> 'check')
                        FROM json_array_elements(:'doc'::json -> 'findings') f
                       WHERE f ->> 'object' IN ('public.dup_k_idx', 'public.big')")
check_eq "fixes: drop the invalid unique index, analyze the table" "$fixes" \
	"DROP INDEX CONCURRENTLY public.dup_k_idx;  -- remove the duplicate keys, then create it again|ANALYZE public.big;"

# the fixes work: after them, nothing needs action
q "ANALYZE public.big" && q "VACUUM ANALYZE public.churn" && q "DROP INDEX public.dup_k_idx" && q "DROP INDEX public.big_v_idx" || fail "fixes"
doc=$("$S" doctor indexes --url "$URL" --json --min-size 10MB); rc=$?
check_eq "after the fixes: exit 0" "$rc" 0
check_eq "after the fixes: no findings" "$(json_q "$doc" "SELECT json_array_length(:'doc'::json -> 'findings')")" 0
doc=$("$S" doctor indexes --url "$URL" --json --schema skiplock); rc=$?
check_eq "--schema skiplock: exit 0" "$rc" 0

if [ "$MODE" = direct ]; then   # option errors: no database involved
	expect_exit "bad --min-size" 2 '--min-size: invalid size "lots"' -- "$S" doctor indexes --url "$URL" --min-size lots
	expect_exit "empty --schema" 2 '--schema must not be empty' -- "$S" doctor indexes --url "$URL" --schema ""
	expect_exit "stray argument" 2 'unexpected argument "x"' -- "$S" doctor indexes --url "$URL" x
	expect_exit "unknown doctor subcommand" 2 'unknown subcommand "nurse"' -- "$S" doctor nurse
	expect_exit "missing doctor subcommand" 2 'missing subcommand' -- "$S" doctor
fi
"$S" doctor --help | grep -q '^ *indexes ' && pass "doctor --help lists indexes" || fail "doctor --help"
help=$("$S" doctor indexes --help)
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES; do
	grep -q "^$section" <<<"$help" || fail "doctor indexes --help lacks $section"
done
"$S" --help | grep -q '^  doctor ' && pass "doctor is listed in skiplock --help" || fail "skiplock --help"
no_leftovers
finish
