//! Leases (docs/leases.md): one holder at a time for a name, judged by the
//! database clock, with a fencing token that grows every time the lease
//! changes hands.  [`Leases`] opens what it needs from a URL, like the
//! worker; [`Leases::acquire`] returns a [`LeaseGuard`] that renews the
//! lease in the background every ttl/3 and tells when it is lost
//! ([`Lease::lost`]); [`Lease::fence`] checks the token inside your own
//! transaction.  Every call is one autocommit statement sent as a simple
//! query: nothing is prepared and nothing stays on the connection, so it
//! all works through PgBouncer in transaction mode.

use crate::conn::{select, Connector};
use crate::error::Error;
use crate::held::{call_bound, LeaseState, CALL_MAX};
use crate::renew::renew;
use crate::slot::Slot;
use crate::sql;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

/// The longest lease name or owner, in characters (the SQL functions' limit).
pub const LEASE_NAME_MAX: usize = 256;
/// The shortest ttl: renewals every ttl/3, each call bounded by ttl/10.
pub const LEASE_TTL_MIN: Duration = Duration::from_millis(100);
/// The longest ttl the SQL functions take.
pub const LEASE_TTL_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where leases are taken: a database URL (direct or through a pooler), how
/// to connect ([`Connector`]) and the owner id written into the lease rows.
/// Cheap to clone; the clones share one connection, opened on first use
/// and reopened after a failure.
#[derive(Clone)]
pub struct Leases {
    slot: Arc<Slot>,
    owner: Arc<str>,
}

impl Leases {
    /// Leases on `url` without TLS, owned by `HOST:PID:RANDOM`.
    pub fn new(url: impl Into<String>) -> Leases {
        Leases::with_connector(url, Connector::no_tls())
    }

    /// Leases on `url`, connecting with `connector` (TLS).
    pub fn with_connector(url: impl Into<String>, connector: Connector) -> Leases {
        Leases { slot: Arc::new(Slot::new(url.into(), connector)), owner: default_owner().into() }
    }

    /// Sets the owner id (1 to 256 characters).  It must identify one
    /// holder: two processes with one owner id are one holder to the lease.
    pub fn owner(mut self, owner: impl Into<String>) -> Leases {
        self.owner = owner.into().into();
        self
    }

    /// The owner id written into the leases taken here.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Takes the lease `name` for `ttl`: `None` while it is held (by anyone,
    /// this owner included).  The guard renews it every ttl/3 until
    /// [`LeaseGuard::release`] or drop.  [`Error::Invalid`] for a name over
    /// [`LEASE_NAME_MAX`] characters, an empty one, or a ttl outside
    /// [`LEASE_TTL_MIN`]..=[`LEASE_TTL_MAX`], before anything is sent.
    pub async fn acquire(&self, name: &str, ttl: Duration) -> Result<Option<LeaseGuard>, Error> {
        check_text("lease name", name)?;
        check_text("lease owner", &self.owner)?;
        check_ttl(ttl)?;
        let q = format!("SELECT skiplock.lease_acquire(name => {}, owner => {}, ttl => {})",
                        sql::text(name)?, sql::text(&self.owner)?, sql::interval(ttl));
        let sent = Instant::now();
        let rows = self.slot.call(&q, (ttl / 3).min(CALL_MAX)).await?;
        let fencing = match rows.first().and_then(|r| r.get(0)) {
            None => return Ok(None),
            Some(v) => v.parse().map_err(|_| Error::protocol("lease_acquire returned no token"))?,
        };
        let st = Arc::new(LeaseState::new(name, &self.owner, fencing, ttl));
        Ok(Some(LeaseGuard::start(self.slot.clone(), st, sent)))
    }
}

fn check_text(what: &str, s: &str) -> Result<(), Error> {
    let n = s.chars().count();
    if n == 0 || n > LEASE_NAME_MAX {
        return Err(Error::invalid(format!("{} must be 1 to {} characters (got {})", what,
                                          LEASE_NAME_MAX, n)));
    }
    sql::text(s).map(|_| ())
}

fn check_ttl(ttl: Duration) -> Result<(), Error> {
    if ttl < LEASE_TTL_MIN || ttl > LEASE_TTL_MAX {
        return Err(Error::invalid(format!("lease ttl must be {:?} to 365 days (got {:?})",
                                          LEASE_TTL_MIN, ttl)));
    }
    Ok(())
}

/// `HOST:PID:RANDOM`, as `skiplock lease run` names its owners.
fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    let random = (crate::jitter::unit() * f64::from(u32::MAX)) as u32;
    format!("{}:{}:{:08x}", host, std::process::id(), random)
}

/// A held lease: its name and token, whether it was lost, and the fenced
/// check for your transactions.  Cheap to clone (the work you run under a
/// lease gets one); the [`LeaseGuard`] renews it.
#[derive(Clone)]
pub struct Lease {
    st: Arc<LeaseState>,
}

impl Lease {
    pub fn name(&self) -> &str {
        &self.st.name
    }

    pub fn owner(&self) -> &str {
        &self.st.owner
    }

    /// The fencing token: larger than that of every earlier holder.
    pub fn fencing(&self) -> i64 {
        self.st.fencing
    }

    pub fn ttl(&self) -> Duration {
        self.st.ttl
    }

    /// Completes when the lease is lost: a renewal matched no row (the
    /// lease expired and was taken, or was released by someone else), or
    /// no renewal succeeded in time — then it fires `ttl/10` before the
    /// lease can expire, so the work can stop while the lease still holds.
    pub async fn lost(&self) {
        self.st.lost.cancelled().await
    }

    /// A token cancelled when the lease is lost (see [`Lease::lost`]).
    pub fn lost_token(&self) -> CancellationToken {
        self.st.lost.clone()
    }

    pub fn is_lost(&self) -> bool {
        self.st.lost.is_cancelled()
    }

    /// Why the lease was lost, once it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.st.why()
    }

    /// [`Error::LeaseLost`] for this lease.
    pub fn lost_error(&self) -> Error {
        Error::LeaseLost { name: self.st.name.clone(), fencing: self.st.fencing }
    }

    /// The fenced write: call it first in the transaction `c` that makes
    /// the lease's effect (`skiplock.lease_fence`).  It locks the lease row
    /// `FOR SHARE` until that transaction ends, so no later holder can take
    /// the lease before it commits, and returns [`Error::LeaseLost`]
    /// (SQLSTATE SK001) unless this token is current and live — also,
    /// without a call, once [`Lease::lost`] fired.  Then roll back: nothing
    /// the transaction wrote may commit.  Keep fenced transactions short.
    pub async fn fence<C: GenericClient + Sync>(&self, c: &C) -> Result<(), Error> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let q = format!("SELECT skiplock.lease_fence(name => {}, fencing => {})",
                        sql::text(&self.st.name)?, self.st.fencing);
        match select(c.client(), &q).await {
            Err(e) if e.sqlstate() == Some("SK001") => Err(self.lost_error()),
            r => r.map(|_| ()),
        }
    }
}

/// Holds a lease: renews it in the background every ttl/3 and releases it
/// on [`LeaseGuard::release`], or on drop at best (a task spawned on the
/// current runtime; if none runs, the lease expires after its ttl).
/// Derefs to its [`Lease`].
pub struct LeaseGuard {
    lease: Lease,
    slot: Arc<Slot>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl LeaseGuard {
    fn start(slot: Arc<Slot>, st: Arc<LeaseState>, held_from: Instant) -> LeaseGuard {
        let stop = CancellationToken::new();
        let task = tokio::spawn(renew(slot.clone(), st.clone(), stop.clone(), held_from));
        LeaseGuard { lease: Lease { st }, slot, stop, task: Some(task) }
    }

    /// A handle on the lease, for the work done under it.
    pub fn handle(&self) -> Lease {
        self.lease.clone()
    }

    /// Stops renewing and releases the lease now (`skiplock.lease_release`),
    /// so another process may take it at once: true when it was released,
    /// false when it was no longer this holder's.  Transient failures are
    /// retried for up to ttl/10; after that the lease expires by itself.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        release(&self.slot, &self.lease.st).await
    }
}

impl std::ops::Deref for LeaseGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.task.is_none() {
            return; /* released */
        }
        self.stop.cancel();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (slot, st) = (self.slot.clone(), self.lease.st.clone());
            rt.spawn(async move {
                if let Err(e) = release(&slot, &st).await {
                    log::warn!("could not release lease \"{}\" (it expires by itself within \
                                {:?}): {}", st.name, st.ttl, e);
                }
            });
        }
    }
}

/// `skiplock.lease_release`, retried while transient for up to ttl/10.
async fn release(slot: &Slot, st: &LeaseState) -> Result<bool, Error> {
    let q = format!("SELECT skiplock.lease_release(name => {}, owner => {}, fencing => {})",
                    sql::text(&st.name)?, sql::text(&st.owner)?, st.fencing);
    let bound = call_bound(st.ttl);
    let end = Instant::now() + bound;
    let mut pause = Duration::from_millis(20);
    loop {
        match slot.call(&q, bound).await {
            Ok(rows) => return Ok(rows.first().and_then(|r| r.get(0)) == Some("t")),
            Err(e) if e.is_transient() && Instant::now() + pause < end => {
                tokio::time::sleep(pause.mul_f64(0.5 + crate::jitter::unit())).await;
                pause *= 2;
            }
            Err(e) => return Err(e),
        }
    }
}
