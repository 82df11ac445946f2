// Whether a connection may LISTEN: the same rule as the C worker
// (src/lib/core/url.c and src/lib/worker/worker_idle.c).  A URL is pooled
// when a host's first DNS label ends in "-pooler" (Neon), its port is 6432
// or 6543 (PgBouncer, Supavisor), or it is Supabase's pooler on a port
// other than 5432.  Otherwise, with pooler "auto", the server is asked for
// its port: a connection is direct only when the server's port is the one
// we dialled (a Unix socket on the server side counts as direct), since a
// pooler on an unusual port answers with the port of the server behind it.
import pg from 'pg';

const MODES = new Set(['auto', 'none', 'transaction', 'session']);

export function checkPoolerMode(mode) {
  if (!MODES.has(mode)) {
    throw new TypeError(`pooler: expected "auto", "none", "transaction" or "session", got ${JSON.stringify(mode)}`);
  }
  return mode;
}

/** "transaction", "session" or "none" from the URL alone (parsed by pg,
 * with its defaults: PGHOST, PGPORT, localhost:5432). */
export function urlPooler(url) {
  const cfg = new pg.Client({ connectionString: url });
  const port = String(cfg.port ?? '');
  const hs = String(cfg.host ?? '').split(',').filter(Boolean);
  if (hs.some((h) => /-pooler$/.test(h.split(/[.:]/)[0])) || port === '6432' || port === '6543') {
    return 'transaction';
  }
  if (hs.some((h) => h.endsWith('.pooler.supabase.com'))) {
    return port === '5432' || port === '' ? 'session' : 'transaction';
  }
  return 'none';
}

/** True when client (connected to url) is known to be direct. */
export async function isDirect(client, url, mode) {
  if (mode === 'none') return true;
  if (mode !== 'auto' || urlPooler(url) !== 'none') return false;
  const { rows } = await client.query('SELECT inet_server_port() AS port');
  const port = rows[0].port;
  return port === null || String(port) === String(client.port);
}
