// idempotency(): the same pipeline as Express middleware (it needs nothing
// from express itself).  Mount it on the route, before any body parser:
//
//   app.post('/charges', idempotency({ db: pool }), async (req, res) => {
//     const c = await req.idempotency.transaction();
//     ... the effect, on c ...
//     res.status(201).json({ id });
//   });
//
// It reads the body (req.rawBody: the bytes; req.body: parsed when the
// content type is JSON), claims the key, and runs the route.  The route's
// res.json(value) with a status below 400 is the response that is stored,
// in the route's transaction, committed, then sent.  An error (4xx or 5xx,
// from the route or the error handler) rolls the transaction back,
// releases the key and is sent as it is: the request did nothing, and the
// client may fix it and send it again with the same key.  A success that
// is not sent with res.json is refused (a 500): it could not be replayed.
import { Deferred, handle, HttpError, httpOptions } from './idem-http.js';

function parseBody(req, body) {
  req.rawBody = body;
  req.body = body;
  if (!/^application\/([\w.+-]+\+)?json\b/i.test(req.headers['content-type'] ?? '')) return;
  try {
    req.body = body.length === 0 ? undefined : JSON.parse(body.toString('utf8'));
  } catch {
    throw new HttpError(400, 'the body is not valid JSON');
  }
}

// Runs the rest of the route; resolves with what it passes to res.json.
function route(req, res, next, ctx) {
  return new Promise((resolve, reject) => {
    const restore = () => {
      delete res.json;
      delete res.end;
    };
    res.json = (value) => {
      restore();
      if (res.statusCode < 400) resolve({ status: res.statusCode, body: value });
      else reject(new Deferred(() => res.json(value)));
      return res;
    };
    res.end = (...args) => {
      restore();
      if (res.statusCode >= 400) reject(new Deferred(() => res.end(...args)));
      else reject(new TypeError(`an idempotent route must answer with res.json(), not a bare ${res.statusCode} response`));
      return res;
    };
    req.idempotency = { key: ctx.key, transaction: ctx.transaction };
    next();
  });
}

/** Express middleware: see docs/clients/node.md, "Idempotent endpoints". */
export function idempotency(opts) {
  const o = httpOptions(opts);
  return (req, res, next) => handle(o, req, res, (body) => {
    parseBody(req, body);
    return (ctx) => route(req, res, next, ctx);
  }, next);
}
