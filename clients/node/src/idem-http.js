// Idempotent HTTP endpoints on Node's http module (the Express middleware
// builds on the same pipeline): read the Idempotency-Key header and the
// body (capped), fingerprint method + URL + body, then idempotent().
//
//   first request      the handler runs; its status and JSON body are stored
//   retry, same body   the stored status and body, Idempotent-Replayed: true
//   concurrent retry   409 with Retry-After
//   same key, new body 422
//   no key, bad key    400;  body over the cap  413  (nothing is written)
//   database down, or the outcome of the COMMIT unknown   503 with Retry-After
import { checkDb } from './db.js';
import { FencedError, TransientError } from './errors.js';
import { fingerprint, idemOptions } from './idem.js';
import { idempotent } from './idem-run.js';

const BODY_MAX = 65536;
const KEY_MAX = 255;

/** An answer decided before or instead of the handler. */
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The route answered by itself with a response that is not stored; send()
 * sends it once the claim was given up. */
export class Deferred extends Error {
  constructor(send) {
    super('the response is not stored');
    this.send = send;
  }
}

export function httpOptions(o) {
  if (o === null || typeof o !== 'object') throw new TypeError('options: expected { db, ttl?, recovery?, ... }');
  checkDb(o.db);
  const maxBodyBytes = o.maxBodyBytes ?? BODY_MAX;
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 0) throw new RangeError(`maxBodyBytes: expected an integer >= 0, got ${maxBodyBytes}`);
  const retryAfter = o.retryAfter ?? 1;
  if (!Number.isInteger(retryAfter) || retryAfter < 0) throw new RangeError(`retryAfter: expected whole seconds, got ${retryAfter}`);
  if (o.onError !== undefined && typeof o.onError !== 'function') throw new TypeError('onError: expected a function');
  idemOptions(o); // checked now, not at the first request
  return { db: o.db, opts: o, maxBodyBytes, retryAfter, onError: o.onError ?? ((err) => console.warn(err)) };
}

/** The Idempotency-Key header: 1 to 255 bytes, or a 400. */
export function requestKey(req) {
  const key = req.headers['idempotency-key'];
  if (key === undefined || key === '') throw new HttpError(400, 'the Idempotency-Key header is required');
  const n = Buffer.byteLength(key);
  if (n > KEY_MAX) throw new HttpError(400, `the Idempotency-Key header is ${n} bytes, over ${KEY_MAX}`);
  return key;
}

/** The body's bytes, or a 413 when it is over max (the rest is drained). */
export function readBody(req, max) {
  const declared = Number(req.headers['content-length'] ?? 0);
  const tooBig = () => new HttpError(413, `the body is over ${max} bytes`);
  return new Promise((resolve, reject) => {
    if (declared > max) {
      req.resume();
      reject(tooBig());
      return;
    }
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n <= max) chunks.push(c);
      else reject(tooBig()); // once; the rest is read and dropped
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function send(res, status, text, headers = {}) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  res.end(text);
}

const error = (res, status, message, headers) => send(res, status, JSON.stringify({ error: message }), headers);

function reply(o, res, r) {
  const later = { 'Retry-After': String(o.retryAfter) };
  if (r.outcome === 'completed') send(res, r.status, r.bodyText);
  else if (r.outcome === 'replay') send(res, r.status, r.bodyText, { 'Idempotent-Replayed': 'true' });
  else if (r.outcome === 'in_progress') error(res, 409, 'a request with this Idempotency-Key is in progress', later);
  else error(res, 422, 'this Idempotency-Key was used for a different request');
}

function fail(o, res, err, unhandled) {
  const later = { 'Retry-After': String(o.retryAfter) };
  if (err instanceof Deferred) err.send();
  else if (err instanceof HttpError) error(res, err.status, err.message, err.status === 413 ? { Connection: 'close' } : {});
  else if (err instanceof FencedError) error(res, 409, 'the claim on this Idempotency-Key was taken over by a retry', later);
  else if (err instanceof TransientError) error(res, 503, `the outcome is not known, retry with the same key: ${err.message}`, later);
  else unhandled(err);
}

/** The pipeline: key, body, then idempotent() with the handler that
 * prepare(body) returns (it may throw an HttpError, before any claim). */
export async function handle(o, req, res, prepare, unhandled) {
  try {
    const key = requestKey(req);
    const body = await readBody(req, o.maxBodyBytes);
    const handler = prepare(body);
    const hash = fingerprint(req.method, req.originalUrl ?? req.url, body);
    reply(o, res, await idempotent(o.db, key, hash, handler, o.opts));
  } catch (err) {
    fail(o, res, err, unhandled);
  }
}

/** A request listener for http.createServer: handler(req, { key, body,
 * transaction }) resolves { status, body }; thrown errors give a 500
 * (reported to onError) and release the key. */
export function idempotentHandler(opts, handler) {
  const o = httpOptions(opts);
  if (typeof handler !== 'function') throw new TypeError('idempotentHandler: expected a handler (req, ctx) => ({ status, body })');
  return (req, res) => handle(o, req, res, (body) => (ctx) => handler(req, { ...ctx, body }), (err) => {
    o.onError(err);
    error(res, 500, 'internal error');
  });
}
