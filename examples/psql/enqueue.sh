#!/usr/bin/env bash
# enqueue.sh — an order and its confirmation email, in one transaction, from
# psql: the job exists if and only if the order does.
#
#   DATABASE_URL=postgresql://… examples/psql/enqueue.sh ORDER_ID [--fail]
#
# With --fail the transaction hits an error after the enqueue and psql
# (ON_ERROR_STOP) rolls it back: no order, no job.  One transaction, no
# session state: works through PgBouncer in transaction mode.
set -euo pipefail
order=${1:?usage: enqueue.sh ORDER_ID [--fail]}
[[ $order =~ ^[0-9]+$ ]] || { echo "enqueue.sh: ORDER_ID must be a number, got '$order'" >&2; exit 2; }
fail=false
[ "${2:-}" = --fail ] && fail=true
psql -X -q -At -v ON_ERROR_STOP=1 -v order="$order" -v fail="$fail" "${DATABASE_URL:?set DATABASE_URL}" <<'SQL'
BEGIN;
INSERT INTO orders (id, total_cents) VALUES (:order, 4200);
SELECT 'email job ' || skiplock.enqueue('email',
         jsonb_build_object('order', :order, 'template', 'confirmation'),
         queue => 'mail', unique_key => 'order-email:' || :order);
-- with --fail the transaction aborts here (a division by zero)
SELECT 1 / CASE WHEN :fail THEN 0 ELSE 1 END AS ok \gset
COMMIT;
SQL
