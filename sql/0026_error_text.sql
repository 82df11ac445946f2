-- skiplock schema step 0026: an attempt's error text is bounded where it
-- is stored.
--
-- The clients now store a failed attempt's error with its stack or
-- traceback, not the message alone, so the text a job keeps per attempt
-- is bounded by the database itself: errors_append keeps the first 8,192
-- characters of an error (every client writes the message on the first
-- line) and says how much was cut.  With
-- the 20 entries a job keeps, no caller — a client, the C worker, a
-- psql user calling skiplock.fail — can make one job's history larger
-- than about 160,000 characters.  The signature is unchanged.

CREATE OR REPLACE FUNCTION skiplock.errors_append(errors jsonb, attempt integer, err text,
                                                  at timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE AS $fn$
  SELECT CASE WHEN err IS NULL THEN errors
              ELSE (CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END)
                   || jsonb_build_array(jsonb_build_object(
                        'attempt', attempt, 'at', at,
                        'error', CASE WHEN length(err) <= 8192 THEN err
                                      ELSE left(err, 8192) || format(E'\n… (%s more characters cut)',
                                                                     length(err) - 8192) END)) END
$fn$;

COMMENT ON FUNCTION skiplock.errors_append(jsonb, integer, text, timestamptz) IS
  'Internal: a job''s error history with one more entry (its text cut at 8,192 characters); the newest 20 are kept.';
