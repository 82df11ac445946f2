// The worker's connections: one for every protocol call (claims, outcomes,
// heartbeats, rescues), whatever the concurrency, and — only when it is
// known to be direct — LISTEN on channel skiplock_jobs.  Through a pooler
// a LISTEN would land on whichever server connection the pooler picked, so
// the worker then polls, or LISTENs on a second connection to a direct
// endpoint (directConnectionString) when one is given and is direct too.
// A lost connection is opened again on the next call.
import pg from 'pg';
import { isDirect } from './pooler.js';

const CHANNEL = 'skiplock_jobs';

export class Connection {
  constructor(url, { pooler, applicationName, onNotify, onError }) {
    this.url = url;
    this.pooler = pooler;
    this.applicationName = applicationName;
    this.onNotify = onNotify;
    this.onError = onError;
    this.client = null;
    this.connecting = null;
    this.direct = false;
    this.listening = false;
  }

  /** The connected client, (re)connecting when needed. */
  get() {
    if (this.client !== null) return Promise.resolve(this.client);
    this.connecting ??= this.#open().finally(() => { this.connecting = null; });
    return this.connecting;
  }

  async #open() {
    const c = new pg.Client({ connectionString: this.url, application_name: this.applicationName });
    c.on('error', (err) => this.#lost(c, err));
    await c.connect();
    try {
      this.direct = await isDirect(c, this.url, this.pooler);
      if (this.direct && this.onNotify) await this.#listen(c);
    } catch (err) {
      c.end().catch(() => {});
      throw err;
    }
    this.client = c;
    return c;
  }

  async #listen(c) {
    c.on('notification', (msg) => { if (msg.channel === CHANNEL) this.onNotify(); });
    await c.query(`LISTEN ${CHANNEL}`);
    this.listening = true;
    this.onNotify(); // jobs enqueued while we were not listening sent nothing we saw
  }

  #lost(c, err) {
    if (this.client === c) {
      this.client = null;
      this.listening = false;
    }
    c.end().catch(() => {});
    this.onError(err);
  }

  /** Drops the connection after a failed call; the next get() reconnects. */
  reset() {
    const c = this.client;
    this.client = null;
    this.listening = false;
    if (c !== null) c.end().catch(() => {});
  }

  async close() {
    const c = this.client ?? (this.connecting ? await this.connecting.catch(() => null) : null);
    this.client = null;
    this.listening = false;
    if (c !== null) await c.end().catch(() => {});
  }
}
