// idempotent(): claim, run the handler (its effect in a transaction it
// opens with ctx.transaction()), store the response in that transaction,
// commit.  A handler that throws rolls its transaction back and releases
// the claim.  A COMMIT that failed is settled by claiming again.
import { classify } from './errors.js';
import { checkDb, isPool } from './db.js';
import { idemClaim, idemComplete, idemOptions, idemRelease } from './idem.js';

const ignore = () => {}; // a checked-out client's socket error: its query rejects with it too

/** The handler's transaction, begun on first use: a client of the pool
 * (db itself when it is a client).  idle_in_transaction_session_timeout
 * is the recovery window: a holder frozen in the middle of it is rolled
 * back by the server no later than the key is handed to a retry. */
class Tx {
  #db;
  #timeoutMs;
  #opening = null;
  #pooled = false;
  client = null;

  constructor(db, timeoutMs) {
    this.#db = db;
    this.#timeoutMs = Math.ceil(timeoutMs);
  }

  open() {
    this.#opening ??= this.#begin();
    return this.#opening;
  }

  async #begin() {
    this.#pooled = isPool(this.#db);
    const c = this.#pooled ? await this.#db.connect() : this.#db;
    if (this.#pooled) c.on('error', ignore);
    try {
      await c.query(`BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${this.#timeoutMs}`);
    } catch (err) {
      this.#release(c, err);
      throw classify(err);
    }
    this.client = c;
    return c;
  }

  #release(c, err) {
    if (!this.#pooled) return;
    c.off('error', ignore);
    c.release(err);
  }

  #end(err) {
    this.#release(this.client, err);
  }

  async commit() {
    if (this.client === null) return;
    try {
      await this.client.query('COMMIT');
      this.#end();
    } catch (err) {
      this.#end(err);
      throw err;
    }
  }

  async rollback() {
    await this.#opening?.catch(() => {});
    if (this.client === null) return;
    await this.client.query('ROLLBACK').then(() => this.#end(), (err) => this.#end(err));
  }
}

// The COMMIT's answer did not come, or it failed: claim again.  A replay
// means it landed.  Otherwise it did not: give the claim up and throw.
async function settle(db, key, requestHash, holder, err, opts) {
  const again = await idemClaim(db, key, requestHash, opts).catch(() => null);
  if (again?.outcome === 'replay') return { ...again, outcome: 'completed' };
  if (again !== null) await idemRelease(db, key, again.holder ?? holder).catch(() => {});
  throw classify(err);
}

/** Runs handler at most once per key (while the key lives): resolves
 * { outcome: 'completed', status, body, bodyText } after running it,
 * { outcome: 'replay', status, body, bodyText } with the stored response,
 * or { outcome: 'in_progress' } / { outcome: 'conflict' }. */
export async function idempotent(db, key, requestHash, handler, opts = {}) {
  checkDb(db);
  if (typeof handler !== 'function') throw new TypeError('idempotent: expected a handler (ctx) => ({ status, body })');
  const o = idemOptions(opts);
  const claim = await idemClaim(db, key, requestHash, opts);
  if (claim.outcome !== 'acquired') return claim;
  const tx = new Tx(db, o.recoveryMs);
  let stored;
  try {
    const response = await handler({ key, transaction: () => tx.open() });
    stored = await idemComplete(tx.client ?? db, key, claim.holder, response, opts);
  } catch (err) {
    await tx.rollback();
    await idemRelease(db, key, claim.holder).catch(() => {});
    throw err;
  }
  try {
    await tx.commit();
  } catch (err) {
    return settle(db, key, requestHash, claim.holder, err, opts);
  }
  return { outcome: 'completed', ...stored };
}
