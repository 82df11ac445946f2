// Idempotency keys (docs/idempotency.md) from Node.  Every decision is the
// database's: the claim is skiplock.idem_claim (one insert on the key's
// primary key), the stored response skiplock.idem_complete with the
// holder token, in the transaction of the effect when there is one, so the
// effect and the response commit together or not at all.
//
// Each call is one statement or one transaction of its own: nothing is
// held on a connection between calls, so it works through PgBouncer in
// transaction mode.  A COMMIT whose answer was lost is settled by claiming
// again: "replay" means it landed; anything else means it did not, and the
// claim is released so that a retry may run at once.
import { createHash } from 'node:crypto';
import { classify } from './errors.js';
import { checkDb } from './db.js';
import { toMs } from './duration.js';

const BYTES_MAX = 255; // a key, a fingerprint (the schema's limits)
const RESPONSE_MAX = 65536;
const CLAIM = `SELECT outcome, response_code, response_body::text AS response_body, holder
                 FROM skiplock.idem_claim(key => $1, request_hash => $2, ttl => $3::interval,
                                           recovery => $4::interval)`;
// The body as PostgreSQL prints it: the first answer and every replay are the same bytes.
const COMPLETE = 'SELECT skiplock.idem_complete(key => $1, response_code => $2::int, response_body => $3::jsonb, ' +
  'holder => $4::text), $3::jsonb::text AS body';
const RELEASE = 'SELECT skiplock.idem_release(key => $1, holder => $2::text)';

function bytes(v, what) {
  if (typeof v !== 'string') throw new TypeError(`${what}: expected a string, got ${typeof v}`);
  const n = Buffer.byteLength(v);
  if (n < 1 || n > BYTES_MAX || v.includes('\u0000')) {
    throw new RangeError(`${what}: expected 1 to ${BYTES_MAX} bytes without NUL, got ${n} bytes`);
  }
  return v;
}

function positive(v, dflt, what) {
  const ms = toMs(v ?? dflt, what);
  if (ms <= 0) throw new RangeError(`${what}: expected a positive duration, got ${ms} ms`);
  return ms;
}

/** ttl (default 24 h), recovery (default 60 s), maxResponseBytes (default 64 KiB). */
export function idemOptions(o = {}) {
  const ttlMs = positive(o.ttl, '24h', 'ttl');
  const recoveryMs = positive(o.recovery, '60s', 'recovery');
  const max = o.maxResponseBytes ?? RESPONSE_MAX;
  if (!Number.isInteger(max) || max < 2) throw new RangeError(`maxResponseBytes: expected an integer >= 2, got ${max}`);
  return { ttl: `${Math.ceil(ttlMs)} milliseconds`, recovery: `${Math.ceil(recoveryMs)} milliseconds`, recoveryMs, maxResponseBytes: max };
}

/** SHA-256 (hex) of method, NUL, path, NUL, body: skl_idem_fingerprint. */
export function fingerprint(method, path, body = '') {
  if (typeof method !== 'string' || typeof path !== 'string') throw new TypeError('fingerprint: method and path must be strings');
  return createHash('sha256').update(method).update('\u0000').update(path).update('\u0000').update(body).digest('hex');
}

const parse = (text) => (text === null ? null : JSON.parse(text));

/** Claims key for the request whose fingerprint is requestHash:
 * { outcome: 'acquired', holder } | { outcome: 'replay', status, body,
 * bodyText } | { outcome: 'in_progress' } | { outcome: 'conflict' }. */
export async function idemClaim(db, key, requestHash, opts) {
  checkDb(db);
  const o = idemOptions(opts);
  const values = [bytes(key, 'idempotency key'), bytes(requestHash, 'request fingerprint'), o.ttl, o.recovery];
  let r;
  try {
    r = (await db.query(CLAIM, values)).rows[0];
  } catch (err) {
    throw classify(err);
  }
  if (r.outcome === 'acquired') return { outcome: r.outcome, holder: r.holder };
  if (r.outcome !== 'replay') return { outcome: r.outcome };
  return { outcome: r.outcome, status: r.response_code, body: parse(r.response_body), bodyText: r.response_body };
}

/** { status, text } of a handler's response, or a TypeError/RangeError. */
function checkResponse(res, max) {
  if (res === null || typeof res !== 'object' || !Number.isInteger(res.status) || res.status < 100 || res.status > 599) {
    throw new TypeError('the response: expected { status: 100..599, body: a JSON value }');
  }
  const text = JSON.stringify(res.body === undefined ? null : res.body);
  if (text === undefined) throw new TypeError('the response body: expected a JSON value');
  const n = Buffer.byteLength(text);
  if (n > max) throw new RangeError(`the response body is ${n} bytes, over the stored-response cap of ${max} bytes`);
  return { status: res.status, text };
}

/** Stores response ({ status, body }) for the claim holder acquired, on db
 * (the effect's transaction, last before COMMIT); FencedError (SK002)
 * when the claim is no longer this holder's.  Resolves { status, body,
 * bodyText }, bodyText as stored. */
export async function idemComplete(db, key, holder, response, opts) {
  checkDb(db);
  const { status, text } = checkResponse(response, idemOptions(opts).maxResponseBytes);
  try {
    const { rows } = await db.query(COMPLETE, [bytes(key, 'idempotency key'), status, text, bytes(holder, 'holder')]);
    return { status, body: parse(rows[0].body), bodyText: rows[0].body };
  } catch (err) {
    throw classify(err);
  }
}

/** Gives the claim up (before any effect), so that a retry runs at once. */
export async function idemRelease(db, key, holder) {
  checkDb(db);
  try {
    await db.query(RELEASE, [bytes(key, 'idempotency key'), bytes(holder, 'holder')]);
  } catch (err) {
    throw classify(err);
  }
}
