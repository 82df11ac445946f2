#!/usr/bin/env bash
# `skiplock explain --compare`: on the seed's shape (an index on events(status)
# where 'pending' is most rows) the index does not reduce the buffers; a
# partial index WHERE status = 'pending' on a table where pending is rare
# does.  The candidate never outlives the command; bad statements exit 2
# before anything runs, and so does a query calling a volatile function such
# as nextval (directly or through a view); a production-sized table needs
# --yes.
. "$(dirname "$0")/lib.sh"

S=$SKL_BIN
json_q() { printf '%s\n' "$2" | psql -X -q -At -v ON_ERROR_STOP=1 -v doc="$1" "$DIRECT_URL" 2>&1; }

# busy: 90% pending; rare: 0.05% pending.  50,000 rows each, one INSERT each.
q "CREATE TABLE public.busy (id bigint, status text, created_at timestamptz, pad text);
   INSERT INTO public.busy SELECT g, CASE WHEN g % 10 = 0 THEN 'done' ELSE 'pending' END,
          now() - g * interval '1 second', repeat('x', 40) FROM generate_series(1, 50000) g;
   CREATE TABLE public.rare (LIKE public.busy);
   INSERT INTO public.rare SELECT g, CASE WHEN g % 2000 = 0 THEN 'pending' ELSE 'done' END,
          now() - g * interval '1 second', repeat('x', 40) FROM generate_series(1, 50000) g;
   ANALYZE public.busy; ANALYZE public.rare" || fail "setup"
indexes() { q "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public'"; }
query() { echo "SELECT id, created_at FROM public.$1 WHERE status = 'pending' ORDER BY created_at DESC LIMIT 50"; }

"$S" explain --url "$URL" --compare 'CREATE INDEX ON public.busy (status)' -- "$(query busy)" >"$TMP/busy"
rc=$?
cat "$TMP/busy"
check_eq "seed's shape: exit 1 (no reduction)" "$rc" 1
grep -qE '^verdict: the index (does not reduce|increases) the shared buffers' "$TMP/busy" &&
	pass "seed's shape: the verdict says so" || fail "verdict: $(tail -n 1 "$TMP/busy")"
grep -qE '^before +Limit' "$TMP/busy" && grep -qE '^after +Limit' "$TMP/busy" &&
	pass "both plans are printed node by node" || fail "plans missing"

doc=$("$S" explain --url "$URL" --json --compare \
	"CREATE INDEX rare_pending_idx ON public.rare (created_at DESC) WHERE status = 'pending'" -- "$(query rare)")
rc=$?
check_eq "partial index on rare rows: exit 0" "$rc" 0
check_eq "partial index: verdict, uses it, fewer buffers" \
	"$(json_q "$doc" "SELECT d ->> 'verdict', d ->> 'uses_index', d ->> 'index',
	                         (d #>> '{after,buffers}')::int < (d #>> '{before,buffers}')::int
	                    FROM (SELECT :'doc'::json AS d) x")" "fewer_buffers|true|public.rare_pending_idx|t"
check_eq "partial index: actual rows of the root" \
	"$(json_q "$doc" "SELECT (:'doc'::json #>> '{after,nodes,0,actual_rows}')::numeric::int")" 25
check_eq "no candidate index is left" "$(indexes)" 0
check_eq "no statistics were kept either" \
	"$(q "SELECT count(*) FROM pg_stats WHERE schemaname = 'public' AND attname = 'status'")" 2

# production-sized: refused without --yes (nothing runs), accepted with it
expect_exit "production-sized without --yes" 2 'public.rare looks production-sized .*pass --yes' -- \
	"$S" explain --url "$URL" --max-rows 1000 --compare 'CREATE INDEX ON public.rare (status)' -- "$(query rare)"
"$S" explain --url "$URL" --max-rows 1000 --yes --compare 'CREATE INDEX ON public.rare (status)' -- "$(query rare)" >/dev/null
check_eq "production-sized with --yes: runs (exit 0)" "$?" 0

# bad input: exit 2, one line, nothing runs (the query's effects would show)
x() { "$S" explain --url "$URL" "$@"; }
ci='CREATE INDEX ON public.busy (status)'
expect_exit "not a SELECT" 2 'the query must be one SELECT, not "DELETE"' -- x --compare "$ci" -- "DELETE FROM public.busy"
expect_exit "a CTE that deletes" 2 'the query must only read' -- \
	x --compare "$ci" -- "WITH d AS (DELETE FROM public.busy RETURNING id) SELECT count(*) FROM d"
expect_exit "query syntax error" 2 'the query: syntax error' -- x --compare "$ci" -- "SELECT FROM WHERE public.busy"
expect_exit "malformed index statement" 2 'the index statement: unbalanced parentheses' -- \
	x --compare "CREATE INDEX ON public.busy (status" -- "$(query busy)"
expect_exit "no such table" 2 'no table public.nope' -- x --compare "CREATE INDEX ON public.nope (a)" -- "SELECT 1"
expect_exit "no such column" 2 'the index statement: column "nope" does not exist' -- \
	x --compare "CREATE INDEX ON public.busy (nope)" -- "$(query busy)"
expect_exit "unique index over duplicates" 2 'the index statement: could not create unique index' -- \
	x --compare "CREATE UNIQUE INDEX ON public.busy (status)" -- "$(query busy)"
if [ "$MODE" = direct ]; then   # shape errors: no database involved (see also unit/test_explain.c)
	expect_exit "CONCURRENTLY" 2 'CONCURRENTLY cannot run inside' -- \
		x --compare "CREATE INDEX CONCURRENTLY ON public.busy (status)" -- "SELECT 1"
	expect_exit "index then another statement" 2 'more than one statement' -- \
		x --compare "CREATE INDEX ON public.busy (status); DROP TABLE public.busy" -- "SELECT 1"
	expect_exit "two statements" 2 'the query: more than one statement' -- \
		x --compare "$ci" -- "SELECT 1; DELETE FROM public.busy"
fi
expect_exit "missing --compare" 2 'missing --compare' -- x -- "SELECT 1"
expect_exit "missing query" 2 'missing the query' -- x --compare "$ci"
expect_exit "two queries" 2 'unexpected argument "SELECT 2"' -- x --compare "$ci" -- "SELECT 1" "SELECT 2"
check_eq "bad input changed nothing" "$(q "SELECT count(*) FROM public.busy")|$(indexes)" "50000|0"

# volatile functions: nextval's effect outlives the ROLLBACK, so a query that
# calls one — itself, through a view, or by a quoted, qualified name — is
# refused before it runs; random() changes nothing and is allowed
q "CREATE SEQUENCE public.s;
   CREATE VIEW public.numbered AS SELECT id, nextval('public.s') AS n FROM public.busy;
   CREATE SCHEMA \"Odd Schema\";
   CREATE FUNCTION \"Odd Schema\".\"Next\"() RETURNS bigint LANGUAGE plpgsql
       AS \$\$BEGIN RETURN nextval('public.s'); END\$\$" >/dev/null || fail "volatile setup"
expect_exit "nextval in the query" 2 'the query calls the volatile function nextval\(regclass\)' -- \
	x --compare "$ci" -- "SELECT id, nextval('public.s') FROM public.busy WHERE id < 10"
expect_exit "nextval behind a view" 2 'the query calls the volatile function nextval\(regclass\)' -- \
	x --compare "$ci" -- "SELECT id, n FROM public.numbered WHERE id < 10"
expect_exit "a quoted, qualified volatile function" 2 'volatile function "Odd Schema"."Next"\(\)' -- \
	x --compare "$ci" -- "SELECT id FROM public.busy WHERE id < \"Odd Schema\".\"Next\"()"
check_eq "the sequence never advanced" "$(q "SELECT is_called FROM public.s")" f
x --compare "CREATE INDEX ON public.rare (created_at DESC) WHERE status = 'pending'" -- \
	"SELECT id FROM public.rare WHERE status = 'pending' AND random() < 2 ORDER BY created_at DESC LIMIT 50" \
	>/dev/null 2>"$TMP/random.err"
rc=$?
[ "$rc" = 0 ] || [ "$rc" = 1 ] && pass "random() is allowed (exit $rc)" || fail "random(): exit $rc: $(cat "$TMP/random.err")"
check_eq "no candidate index is left after the volatile cases" "$(indexes)" 0

help=$("$S" explain --help)
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES; do
	grep -q "^$section" <<<"$help" || fail "explain --help lacks $section"
done
"$S" --help | grep -q '^  explain ' && pass "explain is listed in skiplock --help" || fail "skiplock --help"
no_leftovers
finish
