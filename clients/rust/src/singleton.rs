//! Work under a lease: [`Leases::with_lease`] runs a future only while the
//! lease is held and drops it when the lease is lost;
//! [`Leases::run_singleton`] waits for the lease first, so one replica of
//! many runs the work and another takes over within about the ttl when
//! the holder dies — the crate's `skiplock lease run`.

use crate::error::Error;
use crate::lease::{Lease, LeaseGuard, Leases};
use std::future::Future;
use std::time::Duration;

impl Leases {
    /// Takes the lease `name` (see [`Leases::acquire`]) and runs `f` with
    /// it, renewing meanwhile; releases it when `f` finishes.  `Ok(None)`
    /// when the lease is held elsewhere (f does not run).  When the lease
    /// is lost, `f`'s future is dropped at once — before the lease can
    /// expire — and the result is [`Error::LeaseLost`]; an `.await` in
    /// `f` is where it stops, so make each effect a fenced transaction
    /// ([`Lease::fence`]) and a dropped future commits nothing.
    pub async fn with_lease<F, Fut, T>(&self, name: &str, ttl: Duration, f: F)
                                       -> Result<Option<T>, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        match self.acquire(name, ttl).await? {
            None => Ok(None),
            Some(guard) => run_held(guard, f).await.map(Some),
        }
    }

    /// Waits until the lease `name` is free, takes it and runs `f` under
    /// it (as [`Leases::with_lease`]); returns `f`'s value once it finished
    /// while the lease was held.  Every replica calls it with the same
    /// name: one runs `f`, the others poll every ttl/4 (between 200 ms and
    /// 2 s, jittered), so when the holder dies (its lease expires at most
    /// ttl after its last renewal) another takes over within about the ttl.
    /// When the lease is lost — or `f` returns [`Error::LeaseLost`], as
    /// [`Lease::fence`] does — `f` is dropped and this replica waits for
    /// the lease again, and runs `f` anew once it has it.  Transient
    /// failures to take the lease are retried; another error of `f` or of
    /// the database is returned.  Drop the future to stop (the lease is
    /// then released at best).
    pub async fn run_singleton<F, Fut, T>(&self, name: &str, ttl: Duration, mut f: F)
                                          -> Result<T, Error>
    where
        F: FnMut(Lease) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        loop {
            let guard = self.wait_acquire(name, ttl).await?;
            match run_held(guard, &mut f).await.and_then(|r| r) {
                Err(e @ Error::LeaseLost { .. }) => log::warn!("{}; waiting for it again", e),
                other => return other,
            }
        }
    }

    /// Polls until the lease is taken; retries transient failures.
    async fn wait_acquire(&self, name: &str, ttl: Duration) -> Result<LeaseGuard, Error> {
        let poll = (ttl / 4).clamp(Duration::from_millis(200), Duration::from_secs(2));
        let mut failures = 0;
        loop {
            let pause = match self.acquire(name, ttl).await {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => poll.mul_f64(0.5 + crate::jitter::unit()),
                Err(e) if e.is_transient() => {
                    log::warn!("could not take lease \"{}\" (retrying): {}", name, e);
                    failures += 1;
                    Duration::from_millis(50 << failures.min(5)).mul_f64(crate::jitter::unit())
                }
                Err(e) => return Err(e),
            };
            tokio::time::sleep(pause).await;
        }
    }
}

/// Runs `f` under `guard` until it finishes (then releases the lease) or
/// the lease is lost (then drops it: [`Error::LeaseLost`]).
async fn run_held<F, Fut, T>(guard: LeaseGuard, f: F) -> Result<T, Error>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let lease = guard.handle();
    let body = f(lease.clone());
    tokio::select! {
        biased;
        out = body => {
            if let Err(e) = guard.release().await {
                log::warn!("could not release lease \"{}\" (it expires by itself): {}",
                           lease.name(), e);
            }
            Ok(out)
        }
        _ = lease.lost() => Err(lease.lost_error()),
    }
}
