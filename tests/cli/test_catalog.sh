#!/usr/bin/env bash
# The catalog of schema skiplock as init installs it reads as the reference
# of the SQL API: every function and every table or view has a COMMENT
# (the partitions the maintenance makes are named by finished_partitions
# instead), and every SECURITY DEFINER function pins its search_path to
# pg_catalog, pg_temp, so that no object of the caller's can stand in for
# one of the system's.  Schema skiplock holds the API only: the internal
# functions are in skiplock_internal (sql/0034_internal_schema.sql), each
# commented "Internal", and no function body calls a function by a name
# that is not where it says.
. "$(dirname "$0")/lib.sh"

"$SKL_BIN" init --url "$URL" >/dev/null 2>&1
check_eq "init exits 0" "$?" 0

both="('skiplock'::regnamespace, 'skiplock_internal'::regnamespace)"
missing=$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
             WHERE p.pronamespace IN $both
               AND obj_description(p.oid, 'pg_proc') IS NULL")
check_eq "every function has a COMMENT" "$missing" ""

check_eq "no function of schema skiplock is internal" \
	"$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
	       WHERE p.pronamespace = 'skiplock'::regnamespace
	         AND obj_description(p.oid, 'pg_proc') LIKE 'Internal%'")" ""
check_eq "every function of skiplock_internal says it is internal" \
	"$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
	       WHERE p.pronamespace = 'skiplock_internal'::regnamespace
	         AND obj_description(p.oid, 'pg_proc') NOT LIKE 'Internal%'")" ""
check_eq "there are internal functions to check" \
	"$(q "SELECT count(*) > 30 FROM pg_proc WHERE pronamespace = 'skiplock_internal'::regnamespace")" t

# every schema.f( in a body names a function of that schema (or a type
# there, as a row constructor would)
check_eq "every call in a function body names a function where it is" \
	"$(q "SELECT string_agg(DISTINCT c.fn || ' calls ' || c.called, ', ') FROM (
	        SELECT p.oid::regprocedure::text AS fn, m[1] || '.' || m[2] AS called, m[1] AS nsp, m[2] AS name
	          FROM pg_proc p, regexp_matches(p.prosrc, '\m(skiplock|skiplock_internal)\.([a-z_0-9]+)\(', 'g') m
	         WHERE p.pronamespace IN $both) c
	       WHERE NOT EXISTS (SELECT 1 FROM pg_proc x WHERE x.pronamespace::regnamespace::text = c.nsp
	                                                   AND x.proname = c.name)
	         AND NOT EXISTS (SELECT 1 FROM pg_type t WHERE t.typnamespace::regnamespace::text = c.nsp
	                                                   AND t.typname = c.name)
	         AND NOT EXISTS (SELECT 1 FROM pg_class t WHERE t.relnamespace::regnamespace::text = c.nsp
	                                                    AND t.relname = c.name)")" ""

missing=$(q "SELECT string_agg(c.oid::regclass::text, ', ' ORDER BY 1) FROM pg_class c
             WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
               AND NOT EXISTS (SELECT 1 FROM skiplock.finished_partitions f
                               WHERE f.name = c.relname)
               AND obj_description(c.oid, 'pg_class') IS NULL")
check_eq "every table and view has a COMMENT" "$missing" ""

unpinned=$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
              WHERE p.pronamespace IN $both AND p.prosecdef
                AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)")
check_eq "every SECURITY DEFINER function sets search_path = pg_catalog, pg_temp" "$unpinned" ""
check_eq "there are SECURITY DEFINER functions to check" \
	"$(q "SELECT count(*) > 10 FROM pg_proc WHERE pronamespace = 'skiplock'::regnamespace AND prosecdef")" t

finish
