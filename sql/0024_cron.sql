-- skiplock schema step 0024: fire times decided by the database.
--
-- Until now the C library computed a schedule's fire times and handed them
-- to schedule_fire, so only a C worker fired schedules.  Here the whole
-- evaluation of a schedule is SQL, so that any worker (C, Node, Python,
-- Rust, psql) fires the due schedules with one call and every
-- implementation agrees by construction:
--
--   cron_parse          an expression as five bit sets and Vixie's two
--                       "star" flags, or an @every period; 22023 with the
--                       field and the character for a bad one, in the very
--                       words of the C parser (tests/integration compares
--                       them)
--   cron_zone_check     an IANA zone name the tz database has
--   cron_resolve        a local wall-clock time in a zone as an instant,
--                       with the DST rule of docs/cron.md: a skipped time
--                       fires at the end of its gap, a repeated one at its
--                       first occurrence
--   cron_next           the first fire time after an instant (public)
--   cron_plan           what one evaluation of a schedule does: the fire
--                       times due since its cursor, the catch-up policy
--                       applied, and the next fire time
--   cron_fire           move planned schedules on and enqueue their fire
--                       times, all or nothing
--   cron_tick           fire every due schedule: each row locked SKIP
--                       LOCKED, moved on and its jobs enqueued in the same
--                       transaction (the worker role's call)
--   cron_tick_at        the same at a given instant (owners and tests)
--
-- Time zones are the server's (PostgreSQL reads the system tz database, as
-- the C library does); the session's TimeZone plays no part.

CREATE TYPE skiplock.cron_fields AS (
  minute bigint,      -- bit m: minute m, 0..59
  hour bigint,        -- bit h: hour h, 0..23
  dom bigint,         -- bit d: day d of the month, 1..31
  month bigint,       -- bit m: month m, 1..12
  dow bigint,         -- bit d: weekday d, 0 = Sunday (7 folded into 0)
  dom_star boolean,   -- the field begins with '*': day matching is AND
  dow_star boolean,
  every bigint        -- @every: the period in seconds; 0 otherwise
);

CREATE TYPE skiplock.cron_plan AS (
  any_due boolean,         -- some fire time lies in (cursor, now]
  behind boolean,          -- the oldest of them is older than the grace
  newest timestamptz,      -- the newest due fire time (the cursor when none)
  fires timestamptz[],     -- the fire times to enqueue, ascending
  next timestamptz         -- the first fire time after newest; NULL: none
);

-- ---- parsing ----

-- The error of a bad expression: "invalid cron expression "…": hour field,
-- character 3: 25 is out of range 0-23" (pos is 0-based, field -1: none).
CREATE FUNCTION skiplock.cron_fail(p_text text, p_field int, p_pos int, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '22023',
    MESSAGE = format('invalid cron expression "%s": %scharacter %s: %s', p_text,
                     CASE WHEN p_field >= 0
                          THEN (ARRAY['minute', 'hour', 'day-of-month', 'month',
                                      'day-of-week'])[p_field + 1] || ' field, '
                          ELSE '' END, p_pos + 1, p_what);
END
$fn$;

-- A number or (where the field has them) a name at byte p (0-based) of s:
-- the value and the position after it.
CREATE FUNCTION skiplock.cron_value(s text, p int, lim int, field int, OUT v int,
                                    OUT after int)
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  lo int := (ARRAY[0, 0, 1, 1, 0])[field + 1];
  hi int := (ARRAY[59, 23, 31, 12, 7])[field + 1];
  names text[] := CASE field WHEN 3 THEN ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun',
                                               'jul', 'aug', 'sep', 'oct', 'nov', 'dec']
                             WHEN 4 THEN ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri',
                                               'sat'] END;
  c text := substr(s, p + 1, 1);
  n int := 0;
  word text;
  acc bigint := 0;
BEGIN
  IF c BETWEEN '0' AND '9' THEN
    after := p;
    WHILE after < lim AND substr(s, after + 1, 1) BETWEEN '0' AND '9' LOOP
      acc := acc * 10 + ascii(substr(s, after + 1, 1)) - 48;
      after := after + 1;
      IF acc > 9999 THEN
        PERFORM skiplock.cron_fail(s, field, p, 'number too large');
      END IF;
    END LOOP;
    IF acc < lo OR acc > hi THEN
      PERFORM skiplock.cron_fail(s, field, p, format('%s is out of range %s-%s', acc, lo, hi));
    END IF;
    v := acc;
    RETURN;
  END IF;
  IF NOT (c BETWEEN 'a' AND 'z' OR c BETWEEN 'A' AND 'Z') THEN
    PERFORM skiplock.cron_fail(s, field, p, format('unexpected character ''%s'' (expected a number%s)',
                               c, CASE WHEN names IS NULL THEN '' ELSE ' or a name' END));
  END IF;
  WHILE p + n < lim AND (substr(s, p + n + 1, 1) BETWEEN 'a' AND 'z'
                         OR substr(s, p + n + 1, 1) BETWEEN 'A' AND 'Z') LOOP
    n := n + 1;
  END LOOP;
  word := substr(s, p + 1, n);
  IF names IS NOT NULL AND n = 3 AND lower(word) = ANY (names) THEN
    v := array_position(names, lower(word)) - 1 + CASE field WHEN 3 THEN 1 ELSE 0 END;
    after := p + 3;
    RETURN;
  END IF;
  IF n = 1 AND upper(c) IN ('L', 'W') THEN
    PERFORM skiplock.cron_fail(s, field, p, format('''%s'' is not supported (Vixie cron syntax only)', c));
  END IF;
  PERFORM skiplock.cron_fail(s, field, p, format('unknown name "%s"%s', left(word, 20),
    CASE field WHEN 3 THEN ' (expected jan..dec)' WHEN 4 THEN ' (expected sun..sat)'
               ELSE ' (this field takes numbers only)' END));
END
$fn$;

-- One list item at p: *, */S, N, N-M, N-M/S or N/S (N to the field's end);
-- its bits and the position after it.
CREATE FUNCTION skiplock.cron_item(s text, p int, lim int, field int, OUT bits bigint,
                                   OUT after int)
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  lo int := (ARRAY[0, 0, 1, 1, 0])[field + 1];
  hi int := (ARRAY[59, 23, 31, 12, 7])[field + 1];
  fhi int := hi;
  step int := 1;
  single boolean := false;
  item int := p;
  at int;
  acc bigint := 0;
  r record;
BEGIN
  after := p;
  IF substr(s, p + 1, 1) = '*' THEN
    after := p + 1;
  ELSE
    r := skiplock.cron_value(s, after, lim, field);
    lo := r.v; hi := r.v; after := r.after; single := true;
    IF after < lim AND substr(s, after + 1, 1) = '-' THEN
      after := after + 1;
      at := after;
      IF after = lim THEN
        PERFORM skiplock.cron_fail(s, field, at, 'range without an end');
      END IF;
      r := skiplock.cron_value(s, after, lim, field);
      hi := r.v; after := r.after;
      IF hi < lo THEN
        PERFORM skiplock.cron_fail(s, field, item,
          format('range %s-%s runs backwards (wrap-around is not supported)', lo, hi));
      END IF;
      single := false;
    END IF;
  END IF;
  IF after < lim AND substr(s, after + 1, 1) = '/' THEN
    after := after + 1;
    at := after;
    WHILE after < lim AND substr(s, after + 1, 1) BETWEEN '0' AND '9' LOOP
      acc := acc * 10 + ascii(substr(s, after + 1, 1)) - 48;
      after := after + 1;
      EXIT WHEN acc > 9999;
    END LOOP;
    IF after = at THEN
      PERFORM skiplock.cron_fail(s, field, at, 'step must be a number');
    END IF;
    IF acc < 1 OR acc > fhi THEN
      PERFORM skiplock.cron_fail(s, field, at, format('step %s is out of range 1-%s', acc, fhi));
    END IF;
    step := acc;
    IF single THEN
      hi := CASE WHEN fhi = 7 THEN 6 ELSE fhi END;
    END IF;
  END IF;
  bits := 0;
  FOR v IN lo..hi BY step LOOP
    bits := bits | (1::bigint << CASE WHEN field = 4 AND v = 7 THEN 0 ELSE v END);
  END LOOP;
END
$fn$;

-- The five fields at p of s (a macro's text is parsed as its own
-- expression): the bit sets, checked that some day can match.
CREATE FUNCTION skiplock.cron_fields_at(s text, p int) RETURNS skiplock.cron_fields
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  len int := length(s);
  bits bigint[] := ARRAY[0, 0, 0, 0, 0];
  star boolean[] := ARRAY[false, false, false, false, false];
  dom_at int := 0;
  fend int;
  r record;
  f skiplock.cron_fields;
  max_days int[] := ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  days_exist boolean := false;
BEGIN
  FOR i IN 0..4 LOOP
    WHILE substr(s, p + 1, 1) IN (' ', E'\t') LOOP
      p := p + 1;
    END LOOP;
    IF p >= len THEN
      PERFORM skiplock.cron_fail(s, -1, p, format('expected 5 fields (minute hour day-of-month '
                                 'month day-of-week), found %s', i));
    END IF;
    fend := p;
    WHILE fend < len AND substr(s, fend + 1, 1) NOT IN (' ', E'\t') LOOP
      fend := fend + 1;
    END LOOP;
    IF i = 2 THEN
      dom_at := p;
    END IF;
    star[i + 1] := substr(s, p + 1, 1) = '*';
    LOOP
      r := skiplock.cron_item(s, p, fend, i);
      bits[i + 1] := bits[i + 1] | r.bits;
      p := r.after;
      EXIT WHEN p = fend;
      IF substr(s, p + 1, 1) <> ',' THEN
        PERFORM skiplock.cron_fail(s, i, p, format('unexpected character ''%s''',
                                                   substr(s, p + 1, 1)));
      END IF;
      p := p + 1;
      IF p = fend THEN
        PERFORM skiplock.cron_fail(s, i, p - 1, 'list ends with '',''');
      END IF;
    END LOOP;
  END LOOP;
  WHILE substr(s, p + 1, 1) IN (' ', E'\t') LOOP
    p := p + 1;
  END LOOP;
  IF p < len THEN
    PERFORM skiplock.cron_fail(s, -1, p, 'unexpected sixth field (seconds and years are not supported)');
  END IF;
  f := (bits[1], bits[2], bits[3], bits[4], bits[5], star[3], star[5], 0);
  FOR m IN 1..12 LOOP
    CONTINUE WHEN (f.month >> m) & 1 = 0;
    days_exist := days_exist OR (f.dom & ((2::bigint << max_days[m]) - 2)) <> 0;
  END LOOP;
  IF (f.dom_star OR f.dow_star) AND NOT days_exist THEN
    PERFORM skiplock.cron_fail(s, 2, dom_at, 'never fires: no selected month has any of the selected days');
  END IF;
  RETURN f;
END
$fn$;

-- "250ms", "5s", "1h30m" as milliseconds, in the words of the C library's
-- duration parser (src/lib/core/duration.c); NULL and a message when bad.
CREATE FUNCTION skiplock.cron_duration_ms(s text, OUT ms bigint, OUT error text)
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  maxv CONSTANT bigint := 100::bigint * 365 * 86400000;
  total bigint := 0;
  p int := 0;
  len int := length(s);
  n bigint;
  u text;
  per bigint;
BEGIN
  IF len = 0 THEN
    error := 'empty duration';
    RETURN;
  END IF;
  WHILE p < len LOOP
    IF NOT substr(s, p + 1, 1) BETWEEN '0' AND '9' THEN
      error := format('invalid duration "%s": expected a number at "%s"', s, substr(s, p + 1));
      RETURN;
    END IF;
    n := 0;
    WHILE substr(s, p + 1, 1) BETWEEN '0' AND '9' LOOP
      n := n * 10 + ascii(substr(s, p + 1, 1)) - 48;
      p := p + 1;
      IF n > maxv THEN
        error := format('duration "%s" is too large', s);
        RETURN;
      END IF;
    END LOOP;
    u := substring(substr(s, p + 1) FROM '^[A-Za-z]*');
    per := CASE WHEN u = '' THEN CASE WHEN p = len AND total = 0 THEN 1000 ELSE -1 END
                WHEN u = 'ms' THEN 1 WHEN u IN ('s', 'sec') THEN 1000
                WHEN u IN ('m', 'min') THEN 60000 WHEN u = 'h' THEN 3600000
                WHEN u = 'd' THEN 86400000 ELSE -1 END;
    IF per < 0 THEN
      error := format('invalid duration "%s": unknown or missing unit at "%s" (use ms, s, m, h or d)',
                      s, substr(s, p + 1));
      RETURN;
    END IF;
    IF n > maxv / per OR total + n * per > maxv THEN
      error := format('duration "%s" is too large', s);
      RETURN;
    END IF;
    total := total + n * per;
    p := p + length(u);
  END LOOP;
  ms := total;
END
$fn$;

-- "@every DUR" at p: whole seconds, at least one.
CREATE FUNCTION skiplock.cron_every(s text, p int) RETURNS skiplock.cron_fields
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  len int := length(s);
  n int := 0;
  rest int;
  d record;
BEGIN
  p := p + 6;
  IF substr(s, p + 1, 1) NOT IN (' ', E'\t') OR p >= len THEN
    PERFORM skiplock.cron_fail(s, -1, p, 'expected a duration after @every');
  END IF;
  WHILE substr(s, p + 1, 1) IN (' ', E'\t') LOOP
    p := p + 1;
  END LOOP;
  WHILE p + n < len AND substr(s, p + n + 1, 1) NOT IN (' ', E'\t') LOOP
    n := n + 1;
  END LOOP;
  rest := p + n;
  WHILE substr(s, rest + 1, 1) IN (' ', E'\t') LOOP
    rest := rest + 1;
  END LOOP;
  IF n = 0 OR rest < len THEN
    PERFORM skiplock.cron_fail(s, -1, CASE WHEN n > 0 THEN rest ELSE p END,
                               'expected one duration after @every');
  END IF;
  d := skiplock.cron_duration_ms(substr(s, p + 1, least(n, 63)));
  IF d.error IS NOT NULL THEN
    PERFORM skiplock.cron_fail(s, -1, p, d.error);
  END IF;
  IF d.ms < 1000 OR d.ms % 1000 <> 0 THEN
    PERFORM skiplock.cron_fail(s, -1, p, '@every needs whole seconds, at least 1s');
  END IF;
  RETURN (0, 0, 0, 0, 0, false, false, d.ms / 1000)::skiplock.cron_fields;
END
$fn$;

CREATE FUNCTION skiplock.cron_parse(expression text) RETURNS skiplock.cron_fields
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  s text := expression;
  p int := 0;
  n int := 0;
  bad int;
  word text;
  macros CONSTANT text[][] := ARRAY[['@yearly', '0 0 1 1 *'], ['@annually', '0 0 1 1 *'],
                                    ['@monthly', '0 0 1 * *'], ['@weekly', '0 0 * * 0'],
                                    ['@daily', '0 0 * * *'], ['@midnight', '0 0 * * *'],
                                    ['@hourly', '0 * * * *']];
BEGIN
  IF s IS NULL THEN
    RAISE EXCEPTION 'cron expression is NULL' USING ERRCODE = '22004';
  END IF;
  IF octet_length(s) > 256 THEN
    RAISE EXCEPTION 'cron expression is % bytes, over the limit of 256', octet_length(s)
      USING ERRCODE = '22023';
  END IF;
  bad := (regexp_match(s, '[^\t\x20-\x7e]') IS NOT NULL)::int;
  IF bad = 1 THEN
    -- the C parser counts bytes: the byte offset of the first bad character
    bad := octet_length(substring(s FROM '^[\t\x20-\x7e]*'));
    PERFORM skiplock.cron_fail(s, -1, bad, 'unexpected control or non-ASCII character');
  END IF;
  WHILE substr(s, p + 1, 1) IN (' ', E'\t') LOOP
    p := p + 1;
  END LOOP;
  IF substr(s, p + 1, 1) <> '@' THEN
    RETURN skiplock.cron_fields_at(s, p);
  END IF;
  WHILE p + n < length(s) AND substr(s, p + n + 1, 1) NOT IN (' ', E'\t') LOOP
    n := n + 1;
  END LOOP;
  word := substr(s, p + 1, n);
  IF word = '@every' THEN
    RETURN skiplock.cron_every(s, p);
  END IF;
  FOR i IN 1..7 LOOP
    CONTINUE WHEN lower(word) <> macros[i][1];
    n := p + n;
    WHILE substr(s, n + 1, 1) IN (' ', E'\t') LOOP
      n := n + 1;
    END LOOP;
    IF n < length(s) THEN
      PERFORM skiplock.cron_fail(s, -1, n, 'unexpected text after ' || macros[i][1]);
    END IF;
    RETURN skiplock.cron_fields_at(macros[i][2], 0);
  END LOOP;
  PERFORM skiplock.cron_fail(s, -1, p, format('unknown macro "%s" (expected @yearly, @monthly, '
                             '@weekly, @daily, @hourly or @every DUR)', left(word, 20)));
  RETURN NULL;
END
$fn$;

-- ---- zones ----

-- A zone name the tz database has, in the words of the C library's tz.c,
-- and not one that PostgreSQL reads as an abbreviation (CET is a fixed +1
-- to it, a zone with DST to the tz database).  It reads the list of zones
-- (pg_timezone_names, tens of milliseconds): it checks what is written
-- (`cron add` and `cron apply` call it too, so every role may), the tick
-- does not run it.
CREATE FUNCTION skiplock.cron_zone_check(zone text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF zone IS NULL OR octet_length(zone) > 255
     OR zone !~ '^([A-Za-z0-9_+-][A-Za-z0-9_+.-]*)(/[A-Za-z0-9_+-][A-Za-z0-9_+.-]*)*$' THEN
    RAISE EXCEPTION 'invalid time zone name "%"', coalesce(zone, '(null)')
      USING ERRCODE = '22023';
  END IF;
  IF zone LIKE 'right/%' THEN
    RAISE EXCEPTION 'time zone "%" counts leap seconds, which skiplock does not support', zone
      USING ERRCODE = '22023';
  END IF;
  IF lower(zone) IN (SELECT lower(a.abbrev) FROM pg_timezone_abbrevs a
                     WHERE a.utc_offset <> interval '0' OR a.is_dst) THEN
    RAISE EXCEPTION 'time zone "%" is also an abbreviation, which PostgreSQL reads as a fixed offset; use a region name such as Europe/Paris', zone
      USING ERRCODE = '22023';
  END IF;
  IF zone <> 'UTC' AND NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone) THEN
    RAISE EXCEPTION 'unknown time zone "%" (not in the tz database)', zone
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- The first instant whose local time in the zone is at or past `local`:
-- the instant of `local` itself when that wall-clock time exists (its
-- first occurrence when it occurs twice: PostgreSQL's own conversion takes
-- the later one), or the end of the gap when a spring-forward skipped it
-- (PostgreSQL's conversion reads a skipped time with the offset before the
-- gap, which lands inside the new segment; the gap's end is found by
-- halving between the two offsets).
CREATE FUNCTION skiplock.cron_resolve(local timestamp, zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  t timestamptz := local AT TIME ZONE zone;
  back timestamp := t AT TIME ZONE zone;
  lo timestamptz;
  hi timestamptz;
  mid timestamptz;
  early timestamptz;
BEGIN
  IF back <> local THEN
    -- in a gap: its end lies in (local - offset after, t]
    lo := local AT TIME ZONE 'UTC' - (back - (t AT TIME ZONE 'UTC'));
    hi := t;
    WHILE hi - lo > interval '1 second' LOOP
      mid := lo + date_trunc('second', (hi - lo) / 2);
      IF (mid AT TIME ZONE zone) >= local THEN
        hi := mid;
      ELSE
        lo := mid;
      END IF;
    END LOOP;
    RETURN hi;
  END IF;
  -- an earlier occurrence exists when the offset a day before was larger
  early := local AT TIME ZONE 'UTC' - (((t - interval '1 day') AT TIME ZONE zone)
                                      - ((t - interval '1 day') AT TIME ZONE 'UTC'));
  IF early < t AND (early AT TIME ZONE zone) = local THEN
    RETURN early;
  END IF;
  RETURN t;
END
$fn$;

-- ---- fire times ----

-- The first local time at or after l that the fields match, up to lim.
CREATE FUNCTION skiplock.cron_match_from(f skiplock.cron_fields, l timestamp, lim timestamp)
RETURNS timestamp
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  m int;
  d int;
  wd int;
  h int;
  mi int;
  later bigint;
  dm boolean;
  wm boolean;
BEGIN
  WHILE l <= lim LOOP
    m := extract(month FROM l);
    IF (f.month >> m) & 1 = 0 THEN
      l := date_trunc('month', l) + interval '1 month';
      CONTINUE;
    END IF;
    d := extract(day FROM l);
    wd := extract(dow FROM l);
    dm := (f.dom >> d) & 1 = 1;
    wm := (f.dow >> wd) & 1 = 1;
    IF NOT (CASE WHEN f.dom_star OR f.dow_star THEN dm AND wm ELSE dm OR wm END) THEN
      l := date_trunc('day', l) + interval '1 day';
      CONTINUE;
    END IF;
    h := extract(hour FROM l);
    mi := extract(minute FROM l);
    later := f.minute >> mi << mi;
    IF (f.hour >> h) & 1 = 0 OR later = 0 THEN
      l := date_trunc('hour', l) + interval '1 hour';
      CONTINUE;
    END IF;
    -- the lowest set bit of later: its minute
    RETURN date_trunc('hour', l)
           + make_interval(mins => position('1' IN reverse(later::bit(64)::text)) - 1);
  END LOOP;
  RETURN NULL;
END
$fn$;

-- The first fire time after `after` (NULL: none within 100 years, or
-- none before the year 10000).
CREATE FUNCTION skiplock.cron_next_of(f skiplock.cron_fields, zone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  t_max CONSTANT timestamptz := timestamptz '9999-12-31 23:59:59+00';
  a bigint := floor(extract(epoch FROM after));
  local timestamp;
  lim timestamp;
  l timestamp;
  t timestamptz;
BEGIN
  IF f.every > 0 THEN
    t := to_timestamp((floor(a::numeric / f.every) + 1) * f.every);
    RETURN CASE WHEN t <= t_max THEN t END;
  END IF;
  after := to_timestamp(a);
  local := after AT TIME ZONE zone;
  l := date_trunc('minute', local) + interval '1 minute';
  lim := local + interval '36600 days';
  LOOP
    l := skiplock.cron_match_from(f, l, lim);
    EXIT WHEN l IS NULL;
    t := skiplock.cron_resolve(l, zone);
    IF t > after THEN
      RETURN CASE WHEN t <= t_max THEN t END;
    END IF;
    -- inside a repeated hour: its first occurrence came before `after`
    l := l + interval '1 minute';
  END LOOP;
  RETURN NULL;
END
$fn$;

CREATE FUNCTION skiplock.cron_next(expression text, zone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF after IS NULL OR NOT isfinite(after) OR after < timestamptz '0001-01-01 00:00+00'
     OR after > timestamptz '9999-12-31 23:59:59+00' THEN
    RAISE EXCEPTION 'instant % is outside years 1 to 9999', after USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.cron_zone_check(coalesce(zone, 'UTC'));
  RETURN skiplock.cron_next_of(skiplock.cron_parse(expression), coalesce(zone, 'UTC'), after);
END
$fn$;

-- ---- one evaluation ----

-- What one evaluation of a schedule does at `now`, from its cursor (the
-- last fire time handled, or its creation): not behind (the oldest due
-- fire time within the grace), every due fire time runs (the newest
-- `bound` at most); behind, the policy decides: none runs nothing, latest
-- the newest, all the newest `bound`.  The due fire times are found in
-- windows ending at now that grow fourfold, so the work depends on bound,
-- not on how far behind the cursor is.
CREATE FUNCTION skiplock.cron_plan(f skiplock.cron_fields, zone text, cursor timestamptz,
                                   now timestamptz, policy text, bound int, grace_s bigint)
RETURNS skiplock.cron_plan
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  p skiplock.cron_plan := (false, false, cursor, '{}', NULL);
  first timestamptz := skiplock.cron_next_of(f, zone, cursor);
  max int;
  span bigint := 64;
  lo timestamptz;
  t timestamptz;
  found timestamptz[];
BEGIN
  IF first IS NULL THEN
    RETURN p;
  END IF;
  IF first > now THEN
    p.next := first;
    RETURN p;
  END IF;
  p.any_due := true;
  p.behind := extract(epoch FROM now - first) > grace_s;
  max := CASE WHEN NOT p.behind OR policy = 'all' THEN greatest(bound, 1) ELSE 1 END;
  LOOP
    lo := greatest(cursor, now - make_interval(secs => span));
    found := '{}';
    t := skiplock.cron_next_of(f, zone, lo);
    WHILE t IS NOT NULL AND t <= now LOOP
      found := found || t;
      t := skiplock.cron_next_of(f, zone, t);
    END LOOP;
    EXIT WHEN cardinality(found) >= max OR lo = cursor;
    span := span * 4;
  END LOOP;
  found := found[greatest(cardinality(found) - max + 1, 1):];
  p.newest := found[cardinality(found)];
  p.fires := CASE WHEN p.behind AND policy = 'none' THEN '{}' ELSE found END;
  p.next := skiplock.cron_next_of(f, zone, p.newest);
  RETURN p;
END
$fn$;

-- ---- the tick ----

-- Moves schedules on and enqueues their fire times, all or nothing: the
-- fire times (with their schedules' job settings) in parallel arrays,
-- their unique keys cron:NAME:<fire time>.
CREATE FUNCTION skiplock.cron_fire(names text[], lasts timestamptz[], nexts timestamptz[],
                                   kinds text[], payloads jsonb[], queues text[],
                                   fires timestamptz[], priorities int[], keys text[],
                                   attempts int[])
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE skiplock.schedules x
     SET last_fire = coalesce(u.last_fire, x.last_fire), next_fire = u.next_fire,
         updated_at = now()
    FROM unnest(names, lasts, nexts) AS u(name, last_fire, next_fire)
   WHERE x.name = u.name;
  IF cardinality(fires) > 0 THEN
    PERFORM skiplock.enqueue_many(NULL, kinds, payloads, queues, fires, NULL, priorities, keys,
                                  attempts, NULL, NULL, NULL);
  END IF;
END
$fn$;

-- Fires the due schedules at `at`: each due row is locked SKIP LOCKED (a
-- row another tick holds is left to it) and planned; then all of them are
-- moved on and their jobs enqueued under their unique keys in one
-- statement each (cron_fire), in the caller's transaction: a fire time is
-- enqueued if and only if last_fire moved past it.  A schedule whose
-- stored values cannot be planned, moved or enqueued (a class 22 or 23
-- error) is counted in `failed`, the first one named in `failure`, and the
-- others still fire: when the batch fails, each schedule is fired alone.
-- next_due is the earliest next_fire left, for an idle worker.
CREATE FUNCTION skiplock.cron_tick_at(at timestamptz, max_schedules int DEFAULT 100,
                                      catch_up_bound int DEFAULT 100,
                                      grace interval DEFAULT interval '1 minute')
RETURNS TABLE (due int, fired int, behind int, enqueued bigint, failed int, failure text,
               next_due timestamptz, db_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
  t_end CONSTANT timestamptz := timestamptz '2200-01-01 00:00+00';
  v_now timestamptz := to_timestamp(floor(extract(epoch FROM at)));
  v_grace bigint;
  s record;
  p skiplock.cron_plan;
  -- per schedule planned
  names text[] := '{}'; lasts timestamptz[] := '{}'; nexts timestamptz[] := '{}';
  dues boolean[] := '{}'; behinds boolean[] := '{}'; firsts int[] := '{}'; counts int[] := '{}';
  -- per fire time
  kinds text[] := '{}'; payloads jsonb[] := '{}'; queues text[] := '{}';
  fires timestamptz[] := '{}'; prios int[] := '{}'; keys text[] := '{}'; maxes int[] := '{}';
  n int;
  lo int;
  hi int;
  whole boolean := true;
  ok boolean;
BEGIN
  IF at IS NULL OR NOT isfinite(at) OR max_schedules IS NULL OR max_schedules < 1
     OR catch_up_bound IS NULL OR catch_up_bound < 1 OR catch_up_bound > 100000
     OR grace IS NULL OR grace < interval '0' THEN
    RAISE EXCEPTION 'cron_tick: at must be a finite time, max_schedules at least 1, '
                    'catch_up_bound 1 to 100000 and grace not negative'
      USING ERRCODE = '22023';
  END IF;
  v_grace := floor(extract(epoch FROM grace));
  due := 0; fired := 0; behind := 0; enqueued := 0; failed := 0;
  -- 1. plan every due schedule (one that cannot be planned fails alone)
  FOR s IN
    SELECT x.name, x.expression, x.zone, x.catch_up, x.kind, x.payload, x.queue, x.priority,
           x.max_attempts,
           to_timestamp(floor(extract(epoch FROM greatest(least(coalesce(x.last_fire, x.created_at),
             timestamptz '2199-12-31 23:59:59+00'), timestamptz '1970-01-01 00:00+00')))) AS cursor
      FROM skiplock.schedules x
     WHERE x.enabled AND x.next_fire <= at
     ORDER BY x.next_fire
     LIMIT max_schedules
       FOR UPDATE SKIP LOCKED
  LOOP
    due := due + 1;
    BEGIN
      p := skiplock.cron_plan(skiplock.cron_parse(s.expression), s.zone, s.cursor, v_now,
                              s.catch_up, catch_up_bound, v_grace);
    EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
      failed := failed + 1;
      IF failed = 1 THEN
        failure := format('schedule "%s": %s', left(s.name, 128), left(SQLERRM, 360));
      END IF;
      CONTINUE;
    END;
    n := coalesce(cardinality(p.fires), 0);
    names := names || s.name;
    lasts := lasts || CASE WHEN p.any_due THEN p.newest END;
    nexts := nexts || CASE WHEN p.next < t_end THEN p.next END;
    dues := dues || p.any_due;
    behinds := behinds || p.behind;
    firsts := firsts || (cardinality(fires) + 1);
    counts := counts || n;
    IF n > 0 THEN
      kinds := kinds || array_fill(s.kind, ARRAY[n]);
      payloads := payloads || array_fill(s.payload, ARRAY[n]);
      queues := queues || array_fill(s.queue, ARRAY[n]);
      prios := prios || array_fill(s.priority, ARRAY[n]);
      maxes := maxes || array_fill(s.max_attempts, ARRAY[n]);
      fires := fires || p.fires;
      keys := keys || ARRAY(SELECT 'cron:' || s.name || ':'
                                   || to_char(f AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                              FROM unnest(p.fires) f);
    END IF;
  END LOOP;
  -- 2. move them on and enqueue, all at once; when that fails, one by one
  IF cardinality(names) > 0 THEN
    BEGIN
      PERFORM skiplock.cron_fire(names, lasts, nexts, kinds, payloads, queues, fires, prios,
                                 keys, maxes);
    EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
      whole := false;
    END;
  END IF;
  FOR i IN 1..cardinality(names) LOOP
    ok := whole;
    IF NOT whole THEN
      lo := firsts[i];
      hi := firsts[i] + counts[i] - 1;
      BEGIN
        PERFORM skiplock.cron_fire(names[i:i], lasts[i:i], nexts[i:i], kinds[lo:hi],
                                   payloads[lo:hi], queues[lo:hi], fires[lo:hi], prios[lo:hi],
                                   keys[lo:hi], maxes[lo:hi]);
        ok := true;
      EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        failed := failed + 1;
        IF failed = 1 THEN
          failure := format('schedule "%s": %s', left(names[i], 128), left(SQLERRM, 360));
        END IF;
      END;
    END IF;
    IF ok AND dues[i] THEN
      fired := fired + 1;
      behind := behind + behinds[i]::int;
      enqueued := enqueued + counts[i];
    END IF;
  END LOOP;
  next_due := (SELECT min(x.next_fire) FROM skiplock.schedules x WHERE x.enabled);
  db_now := at;
  RETURN NEXT;
END
$fn$;

-- The worker role's tick: at the database's now().
CREATE FUNCTION skiplock.cron_tick(max_schedules int DEFAULT 100, catch_up_bound int DEFAULT 100,
                                   grace interval DEFAULT interval '1 minute')
RETURNS TABLE (due int, fired int, behind int, enqueued bigint, failed int, failure text,
               next_due timestamptz, db_now timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT * FROM skiplock.cron_tick_at(now(), max_schedules, catch_up_bound, grace);
$fn$;

COMMENT ON TYPE skiplock.cron_fields IS
  'A parsed cron expression: five bit sets, Vixie''s star flags, or an @every period in seconds.';
COMMENT ON TYPE skiplock.cron_plan IS
  'What one evaluation of a schedule does: the due fire times to enqueue, the newest, the next.';
COMMENT ON FUNCTION skiplock.cron_fail(text, int, int, text) IS
  'Internal: raises 22023 for a bad cron expression, naming the field and the character.';
COMMENT ON FUNCTION skiplock.cron_value(text, int, int, int) IS
  'Internal: a number or a month or weekday name in a cron field.';
COMMENT ON FUNCTION skiplock.cron_item(text, int, int, int) IS
  'Internal: one item of a cron field''s list (*, N, N-M, with /S) as bits.';
COMMENT ON FUNCTION skiplock.cron_fields_at(text, int) IS
  'Internal: the five fields of a cron expression, checked that some day matches.';
COMMENT ON FUNCTION skiplock.cron_duration_ms(text) IS
  'Internal: a duration such as 1h30m as milliseconds, or the error of a bad one.';
COMMENT ON FUNCTION skiplock.cron_every(text, int) IS
  'Internal: an @every expression''s period, whole seconds, at least 1s.';
COMMENT ON FUNCTION skiplock.cron_parse(text) IS
  'Internal: a cron expression parsed, or 22023 naming the field and character that are wrong.';
COMMENT ON FUNCTION skiplock.cron_zone_check(text) IS
  'Refuses (22023) a zone name the tz database does not have, or one PostgreSQL reads as a fixed-offset abbreviation.';
COMMENT ON FUNCTION skiplock.cron_resolve(timestamp, text) IS
  'Internal: a local time in a zone as an instant: a skipped time at the end of its gap, a repeated one at its first occurrence.';
COMMENT ON FUNCTION skiplock.cron_match_from(skiplock.cron_fields, timestamp, timestamp) IS
  'Internal: the first local time at or after l that a parsed expression matches, up to lim.';
COMMENT ON FUNCTION skiplock.cron_next_of(skiplock.cron_fields, text, timestamptz) IS
  'Internal: the first fire time of a parsed expression after an instant; NULL when none.';
COMMENT ON FUNCTION skiplock.cron_next(text, text, timestamptz) IS
  'The first fire time of a cron expression in an IANA zone after an instant; NULL when it never fires again.';
COMMENT ON FUNCTION skiplock.cron_plan(skiplock.cron_fields, text, timestamptz, timestamptz, text, int, bigint) IS
  'Internal: one evaluation of a schedule: its due fire times with the catch-up policy applied, and the next.';
COMMENT ON FUNCTION skiplock.cron_fire(text[], timestamptz[], timestamptz[], text[], jsonb[], text[], timestamptz[], int[], text[], int[]) IS
  'Internal: moves planned schedules on and enqueues their fire times under cron:NAME:<fire time>, all or nothing.';
COMMENT ON FUNCTION skiplock.cron_tick_at(timestamptz, int, int, interval) IS
  'Fires the schedules due at an instant (owners and tests): each moved on and its jobs enqueued once for the fleet.';
COMMENT ON FUNCTION skiplock.cron_tick(int, int, interval) IS
  'Fires the due schedules once for the fleet, at now(); the earliest next fire time for an idle worker.';

-- New functions are executable by PUBLIC until revoked.  cron_next,
-- cron_tick and cron_zone_check (SECURITY DEFINER) reach the worker and
-- operator roles through grant_role; the others are internal.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
