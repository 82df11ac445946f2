//! A lease's renewals, on the timeline of `skiplock lease run`
//! (src/cli/lease/lease_run.c).  `held_from` is when the last successful
//! renewal (or the acquisition) was sent: the server set the expiry at
//! least ttl after it, so the lease is ours until `held_from + ttl` at the
//! earliest.  Renewals are due every ttl/3; transient failures are retried
//! with jittered backoff until `held_from + ttl - bound` (bound: the limit
//! on one call, ttl/10), and then the lease counts as lost, before anyone
//! else can take it.  A renewal that matches no row loses it at once.
//! The clock is monotonic and keeps counting while the process is stopped:
//! a holder frozen past its deadline finds the lease lost when it runs
//! again, without trusting a renewal.

use crate::held::{call_bound, LeaseState};
use crate::slot::Slot;
use crate::sql;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

/// Renews until `stop` is cancelled or the lease is lost.
pub(crate) async fn renew(slot: Arc<Slot>, st: Arc<LeaseState>, stop: CancellationToken,
                          mut held_from: Instant) {
    let q = match renew_sql(&st) {
        Ok(q) => q,
        Err(e) => return st.lose(e.to_string()),
    };
    let (ttl, bound) = (st.ttl, call_bound(st.ttl));
    let mut next = held_from + ttl / 3;
    let mut failures = 0;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = sleep_until(next) => {}
        }
        let (now, deadline) = (Instant::now(), held_from + ttl - bound);
        if now >= deadline {
            return st.lose(format!("no renewal succeeded for {:?} (ttl {:?}): the process was \
                                    paused or the database was unreachable",
                                   now - held_from, ttl));
        }
        match slot.call(&q, bound.min(deadline - now)).await {
            Ok(rows) if rows.first().and_then(|r| r.get(0)) == Some("t") => {
                held_from = now;
                next = now + ttl / 3;
                failures = 0;
            }
            Ok(_) => {
                return st.lose("the renewal matched no row: the lease expired and was taken, \
                                or was released"
                    .to_string())
            }
            Err(e) if !e.is_transient() => return st.lose(format!("the renewal failed: {}", e)),
            Err(e) => {
                log::warn!("could not renew lease \"{}\" ({:?} left to retry): {}", st.name,
                           deadline.saturating_duration_since(Instant::now()), e);
                next = (Instant::now() + backoff(ttl, failures)).min(deadline);
                failures += 1;
            }
        }
    }
}

fn renew_sql(st: &LeaseState) -> Result<String, crate::Error> {
    Ok(format!("SELECT skiplock.lease_renew(name => {}, owner => {}, fencing => {}, ttl => {})",
               sql::text(&st.name)?, sql::text(&st.owner)?, st.fencing, sql::interval(st.ttl)))
}

/// Full jitter: uniform in [0, min(ttl/10, ttl/50 · 2^failures)].
fn backoff(ttl: Duration, failures: u32) -> Duration {
    let cap = ttl / 10;
    let ceiling = (ttl / 50).saturating_mul(1 << failures.min(10)).min(cap);
    ceiling.mul_f64(crate::jitter::unit())
}
