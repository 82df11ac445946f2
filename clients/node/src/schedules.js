// Schedules declared in an application's code (docs/cron.md; schema step
// 0025): one call to skiplock.schedules_declare applies them as `skiplock
// cron apply` would, without removing the others.  The database checks
// every schedule before it writes anything (SQLSTATE 22023, "schedule N
// ("name"): …", a PermanentError here), and it remembers every definition
// it was given: one replaced since is reported superseded and not applied
// again, so replicas of two versions of an application starting side by
// side in a rolling deploy never make a schedule flap; `force` applies it
// anyway (a deliberate rollback).
import { checkDb } from './db.js';
import { classify } from './errors.js';

// The JavaScript names of the fields whose SQL names differ.
const FIELD = { maxAttempts: 'max_attempts', catchUp: 'catch_up' };

/** Checks a schedules argument: an array of plain objects (the database
 * checks their fields).  Throws a TypeError naming `what`. */
export function checkSchedules(schedules, what = 'schedules') {
  if (!Array.isArray(schedules)) {
    throw new TypeError(`${what}: expected an array of { name, expression, kind, ... }`);
  }
  for (const [i, s] of schedules.entries()) {
    if (s === null || typeof s !== 'object' || Array.isArray(s)) {
      throw new TypeError(`${what}[${i}]: expected an object { name, expression, kind, ... }`);
    }
  }
  return schedules;
}

/** The schedules as the JSON array schedules_declare takes: maxAttempts
 * and catchUp renamed; any other field as it is (an unknown one is the
 * database's error). */
export function schedulesJson(schedules) {
  return JSON.stringify(checkSchedules(schedules).map((s) =>
    Object.fromEntries(Object.entries(s).map(([k, v]) => [FIELD[k] ?? k, v]))));
}

function warnSuperseded({ name, detail }) {
  process.emitWarning(`schedule "${name}" not applied, superseded: ${detail}`,
    { type: 'SkiplockWarning', code: 'SKIPLOCK_SCHEDULE_SUPERSEDED' });
}

/** Applies schedules declared in code, in one autocommit statement on db
 * (a pg.Pool, or a client outside a transaction of yours).  Resolves to
 * [{ name, action, detail }], action 'created', 'updated', 'unchanged' or
 * 'superseded' (each superseded one is also emitted as a process warning
 * with its detail).  A bad schedule rejects with the database's message
 * as a PermanentError (code 22023) and nothing is written. */
export async function declareSchedules(db, schedules, { force = false } = {}) {
  checkDb(db);
  if (typeof force !== 'boolean') throw new TypeError('force: expected a boolean');
  const json = schedulesJson(schedules);
  let rows;
  try {
    ({ rows } = await db.query('SELECT name, action, detail FROM skiplock.schedules_declare(schedules => $1::jsonb, ' +
      'force => $2::boolean)',
      [json, force]));
  } catch (err) {
    throw classify(err);
  }
  for (const r of rows) if (r.action === 'superseded') warnSuperseded(r);
  return rows;
}
