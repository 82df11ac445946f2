//! What the parts of a held lease share (lease.rs, renew.rs): its name,
//! owner, token and ttl, whether and why it was lost, and the bound on one
//! call.

use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The bound on one lease call, whatever the ttl.
pub(crate) const CALL_MAX: Duration = Duration::from_secs(10);

/// How long one renewal or release may take: ttl/10, at most 10 s.
pub(crate) fn call_bound(ttl: Duration) -> Duration {
    (ttl / 10).min(CALL_MAX)
}

pub(crate) struct LeaseState {
    pub name: String,
    pub owner: String,
    pub fencing: i64,
    pub ttl: Duration,
    pub lost: CancellationToken,
    why: Mutex<Option<String>>,
}

impl LeaseState {
    pub fn new(name: &str, owner: &str, fencing: i64, ttl: Duration) -> LeaseState {
        LeaseState { name: name.to_string(), owner: owner.to_string(), fencing, ttl,
                     lost: CancellationToken::new(), why: Mutex::new(None) }
    }

    /// Why the lease was lost, once it was.
    pub fn why(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The lease is lost: says why, once, and fires the token.
    pub fn lose(&self, why: String) {
        let mut w = self.why.lock().unwrap_or_else(|e| e.into_inner());
        if w.is_none() {
            log::warn!("lease \"{}\" lost (token {}): {}", self.name, self.fencing, why);
            *w = Some(why);
        }
        self.lost.cancel();
    }
}
