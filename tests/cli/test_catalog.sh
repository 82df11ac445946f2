#!/usr/bin/env bash
# The catalog of schema skiplock as init installs it reads as the reference
# of the SQL API: every function and every table or view has a COMMENT
# (the partitions the maintenance makes are named by finished_partitions
# instead), and every SECURITY DEFINER function pins its search_path to
# pg_catalog, pg_temp, so that no object of the caller's can stand in for
# one of the system's.
. "$(dirname "$0")/lib.sh"

"$SKL_BIN" init --url "$URL" >/dev/null 2>&1
check_eq "init exits 0" "$?" 0

missing=$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
             WHERE p.pronamespace = 'skiplock'::regnamespace
               AND obj_description(p.oid, 'pg_proc') IS NULL")
check_eq "every function has a COMMENT" "$missing" ""

missing=$(q "SELECT string_agg(c.oid::regclass::text, ', ' ORDER BY 1) FROM pg_class c
             WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
               AND NOT EXISTS (SELECT 1 FROM skiplock.finished_partitions f
                               WHERE f.name = c.relname)
               AND obj_description(c.oid, 'pg_class') IS NULL")
check_eq "every table and view has a COMMENT" "$missing" ""

unpinned=$(q "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
              WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prosecdef
                AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)")
check_eq "every SECURITY DEFINER function sets search_path = pg_catalog, pg_temp" "$unpinned" ""
check_eq "there are SECURITY DEFINER functions to check" \
	"$(q "SELECT count(*) > 10 FROM pg_proc WHERE pronamespace = 'skiplock'::regnamespace AND prosecdef")" t

finish
