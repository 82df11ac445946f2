//! Idempotency keys (docs/idempotency.md): one outcome per key, however
//! often and however concurrently the key arrives.  [`idempotent`] claims
//! the key, runs your effect and stores its response in one transaction,
//! and answers a retry with the stored response; [`claim`] and [`Holder`]
//! are the steps it is made of, for an effect that is not a database write.
//! Each call is one simple query on the connection you give: nothing is
//! prepared and nothing stays on the connection, so it works through
//! PgBouncer in transaction mode.

use crate::conn::select;
use crate::error::Error;
use crate::sql;
use futures_util::future::BoxFuture;
use std::fmt::{self, Write};
use std::time::Duration;
use tokio_postgres::{GenericClient, Transaction};

/// The longest key or fingerprint, in bytes (the SQL functions' limit).
pub const IDEM_KEY_MAX: usize = 255;
/// The default cap on a stored response body, in bytes of JSON.
pub const IDEM_RESPONSE_MAX: usize = 64 * 1024;

/// How a key is claimed and what may be stored under it.
#[derive(Clone, Debug)]
pub struct IdemOptions {
    /// How long the key is remembered after its claim (default 24 hours):
    /// longer than the longest retry chain of your clients.
    pub ttl: Duration,
    /// How long an in-progress claim is protected from takeover (default
    /// 60 s): after it, a retry of the same request takes over the claim of
    /// a holder that died.  Choose it longer than the slowest handler.
    pub recovery: Duration,
    /// What [`Idempotent::InProgress`] advises (default 1 s).
    pub retry_after: Duration,
    /// The largest response body stored, in bytes of JSON (default
    /// [`IDEM_RESPONSE_MAX`]); a larger one is [`Error::Invalid`] and
    /// nothing is written.
    pub max_response_bytes: usize,
}

impl Default for IdemOptions {
    fn default() -> IdemOptions {
        IdemOptions { ttl: Duration::from_secs(24 * 3600), recovery: Duration::from_secs(60),
                      retry_after: Duration::from_secs(1), max_response_bytes: IDEM_RESPONSE_MAX }
    }
}

/// What identifies the request a key stands for: the same key with another
/// fingerprint is a conflict.
#[derive(Clone, Debug)]
pub struct Fingerprint(Fp);

#[derive(Clone, Debug)]
enum Fp {
    Hash(String),
    Request(Vec<u8>),
}

impl Fingerprint {
    /// A fingerprint you computed (1 to 255 bytes).
    pub fn hash(h: impl Into<String>) -> Fingerprint {
        Fingerprint(Fp::Hash(h.into()))
    }

    /// The fingerprint of an HTTP request, as `skl_idem_fingerprint`
    /// computes it: SHA-256 (64 lower-case hex digits) over the method, a
    /// NUL, the path, a NUL and the body's bytes.  The server computes it,
    /// in the claim's statement.
    pub fn request(method: &str, path: &str, body: &[u8]) -> Fingerprint {
        let mut bytes = Vec::with_capacity(method.len() + path.len() + body.len() + 2);
        for part in [method.as_bytes(), b"\0", path.as_bytes(), b"\0", body] {
            bytes.extend_from_slice(part);
        }
        Fingerprint(Fp::Request(bytes))
    }

    /// The SQL expression of the fingerprint.
    fn sql(&self) -> Result<String, Error> {
        match &self.0 {
            Fp::Hash(h) => {
                check_len("request fingerprint", h)?;
                sql::text(h)
            }
            Fp::Request(b) => {
                let mut hex = String::with_capacity(2 * b.len());
                for byte in b {
                    let _ = write!(hex, "{:02x}", byte);
                }
                Ok(format!("encode(sha256(decode('{}', 'hex')), 'hex')", hex))
            }
        }
    }
}

impl From<&str> for Fingerprint {
    fn from(h: &str) -> Fingerprint {
        Fingerprint::hash(h)
    }
}

impl From<String> for Fingerprint {
    fn from(h: String) -> Fingerprint {
        Fingerprint::hash(h)
    }
}

/// A stored response: the status code and the body as JSON text, exactly
/// as PostgreSQL prints the `jsonb` — the same bytes the first time and on
/// every replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
}

/// What [`idempotent`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Idempotent {
    /// This call ran the effect; its response is stored under the key.
    Ran(StoredResponse),
    /// Done before: the stored response, to send verbatim.
    Replayed(StoredResponse),
    /// Another attempt holds the key (HTTP: 409 with `Retry-After`).
    InProgress { retry_after: Duration },
    /// The key was used for a different request (HTTP: 422).
    Conflict,
}

/// The outcome of [`claim`].
#[derive(Debug)]
pub enum Claim {
    /// Do the work, then [`Holder::complete`] or [`Holder::release`].
    Acquired(Holder),
    Replay(StoredResponse),
    InProgress,
    Conflict,
}

/// An acquired claim: the key and the holder token that alone may complete
/// or release it.  The token is a secret: it is never printed.
pub struct Holder {
    key: String,
    token: String,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder").field("key", &self.key).field("token", &"<secret>").finish()
    }
}

fn check_len(what: &str, s: &str) -> Result<(), Error> {
    if s.is_empty() || s.len() > IDEM_KEY_MAX {
        return Err(Error::invalid(format!("{} must be 1 to {} bytes (got {})", what,
                                          IDEM_KEY_MAX, s.len())));
    }
    Ok(())
}

fn check_options(o: &IdemOptions) -> Result<(), Error> {
    if o.ttl < Duration::from_millis(1) || o.recovery < Duration::from_millis(1) {
        return Err(Error::invalid(format!("ttl and recovery window must be at least 1 ms (got \
                                           {:?} and {:?})", o.ttl, o.recovery)));
    }
    Ok(())
}

/// Claims `key` for the request `fp` (`skiplock.idem_claim`, one
/// autocommit statement on `c`).  [`Error::Invalid`] for a key or
/// fingerprint that is empty or over [`IDEM_KEY_MAX`] bytes, or a ttl or
/// recovery window under 1 ms, before anything is sent.
pub async fn claim<C: GenericClient + Sync>(c: &C, key: &str, fp: &Fingerprint,
                                            o: &IdemOptions) -> Result<Claim, Error> {
    check_len("idempotency key", key)?;
    check_options(o)?;
    let q = format!("SELECT outcome, response_code, response_body::text, holder \
                     FROM skiplock.idem_claim(key => {}, request_hash => {}, ttl => {}, \
                     recovery => {})",
                    sql::text(key)?, fp.sql()?, sql::interval(o.ttl), sql::interval(o.recovery));
    let rows = select(c.client(), &q).await?;
    let r = rows.first().ok_or_else(|| Error::protocol("idem_claim returned no row"))?;
    Ok(match r.get(0) {
        Some("acquired") => Claim::Acquired(Holder {
            key: key.to_string(),
            token: r.get(3).ok_or_else(|| Error::protocol("idem_claim returned no holder"))?
                .to_string(),
        }),
        Some("replay") => Claim::Replay(StoredResponse {
            status: r.get(1).and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::protocol("idem_claim replayed no status"))?,
            body: r.get(2).unwrap_or("null").to_string(),
        }),
        Some("in_progress") => Claim::InProgress,
        Some("conflict") => Claim::Conflict,
        other => return Err(Error::protocol(format!("idem_claim returned {:?}", other))),
    })
}

impl Holder {
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Stores the response (`skiplock.idem_complete`) on `c` — call it in
    /// the transaction of the effect, last, so both commit or neither does
    /// — and returns it as every replay will send it.  [`Error::Invalid`]
    /// before anything is sent for a status outside 100..=999 or a body
    /// over `max_body` bytes; [`Error::IdemNotHeld`] (SK002) when the key
    /// is no longer in progress under this holder: roll back.
    pub async fn complete<C: GenericClient + Sync>(&self, c: &C, status: u16,
                                                   body: &serde_json::Value, max_body: usize)
                                                   -> Result<StoredResponse, Error> {
        if !(100..=999).contains(&status) {
            return Err(Error::invalid(format!("response status must be 100 to 999 (got {})",
                                              status)));
        }
        let json = body.to_string();
        if json.len() > max_body {
            return Err(Error::invalid(format!("response body is {} bytes, over the cap of {} \
                                               bytes", json.len(), max_body)));
        }
        let lit = sql::text(&json)?;
        let q = format!("SELECT ({}::jsonb)::text, skiplock.idem_complete(key => {}, \
                         response_code => {}, response_body => {}::jsonb, holder => {})",
                        lit, sql::text(&self.key)?, status, lit, sql::text(&self.token)?);
        let rows = match select(c.client(), &q).await {
            Err(e) if e.sqlstate() == Some("SK002") => {
                return Err(Error::IdemNotHeld { key: self.key.clone() })
            }
            r => r?,
        };
        let body = rows.first().and_then(|r| r.get(0))
            .ok_or_else(|| Error::protocol("idem_complete returned no row"))?;
        Ok(StoredResponse { status, body: body.to_string() })
    }

    /// Gives the claim up (`skiplock.idem_release`, autocommit on `c`) after
    /// a failure before any side effect, so a retry may run at once.
    /// [`Error::IdemNotHeld`] when another holder has the key.
    pub async fn release<C: GenericClient + Sync>(&self, c: &C) -> Result<(), Error> {
        let q = format!("SELECT skiplock.idem_release(key => {}, holder => {})",
                        sql::text(&self.key)?, sql::text(&self.token)?);
        match select(c.client(), &q).await {
            Err(e) if e.sqlstate() == Some("SK002") => {
                Err(Error::IdemNotHeld { key: self.key.clone() })
            }
            r => r.map(|_| ()),
        }
    }
}

/// The effect of [`idempotent`]: given the transaction, it writes what the
/// request does and returns the response, `(status, body)`.
pub type Effect<'t, E> = BoxFuture<'t, Result<(u16, serde_json::Value), E>>;

/// Runs a request at most once per key.  Claims `key` for `fp` on
/// `client`; when acquired, opens a transaction, runs `effect` in it and
/// stores the response there ([`Holder::complete`]), then commits: the
/// effect and the response commit together or not at all.  A retry gets
/// [`Idempotent::Replayed`] with the same status and the same bytes; a
/// concurrent one [`Idempotent::InProgress`]; the key with another
/// fingerprint [`Idempotent::Conflict`].
///
/// When `effect` fails, or its response is refused (a status outside
/// 100..=999, a body over `o.max_response_bytes`: [`Error::Invalid`]), the
/// transaction rolls back and the claim is released, so nothing is written
/// and a retry may run at once.  When the commit fails the outcome is
/// unknown: the error is returned, and a retry learns the outcome (a
/// replay, or the work runs once).  If this future is dropped between the
/// claim and the commit, the claim stays in progress until its recovery
/// window ends: run it in a task of its own where requests can be dropped
/// (a client that hangs up).
pub async fn idempotent<C, F, E>(client: &mut C, key: &str, fp: impl Into<Fingerprint>,
                                 o: &IdemOptions, effect: F) -> Result<Idempotent, E>
where
    C: GenericClient + Sync,
    F: for<'t> FnOnce(&'t Transaction<'t>) -> Effect<'t, E>,
    E: From<Error>,
{
    let holder = match claim(&*client, key, &fp.into(), o).await? {
        Claim::Acquired(h) => h,
        Claim::Replay(r) => return Ok(Idempotent::Replayed(r)),
        Claim::InProgress => return Ok(Idempotent::InProgress { retry_after: o.retry_after }),
        Claim::Conflict => return Ok(Idempotent::Conflict),
    };
    let ran = run_effect(client, &holder, o, effect).await;
    if ran.is_err() {
        // Rolled back (or the commit failed, in which case the key is either
        // completed, and left alone, or still ours): give the key up.
        match holder.release(&*client).await {
            Ok(()) => {}
            Err(e @ Error::IdemNotHeld { .. }) => log::debug!("{}", e),
            Err(e) => log::warn!("could not release idempotency key \"{}\" (a retry takes it over after \
                        the recovery window): {}", key, e),
        }
    }
    ran.map(Idempotent::Ran)
}

/// The transaction of [`idempotent`]: the effect, the completion, commit.
async fn run_effect<C, F, E>(client: &mut C, holder: &Holder, o: &IdemOptions, effect: F)
                             -> Result<StoredResponse, E>
where
    C: GenericClient + Sync,
    F: for<'t> FnOnce(&'t Transaction<'t>) -> Effect<'t, E>,
    E: From<Error>,
{
    let tx = client.transaction().await.map_err(Error::from)?;
    let (status, body) = effect(&tx).await?;
    let stored = holder.complete(&tx, status, &body, o.max_response_bytes).await?;
    tx.commit().await.map_err(Error::from)?;
    Ok(stored)
}
