//! The worker: its options, its handlers, and the handle of a running one.

pub use crate::config::{Event, EventHook, HandlerResult};
use crate::config::Config;
use crate::conn::Connector;
use crate::error::Error;
use crate::job::{HandlerError, Job};
use crate::pooler::Pooler;
use crate::runloop;
use crate::schedule::Schedule;
use futures_util::FutureExt;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Builds a [`Worker`]; see [`Worker::builder`].
pub struct WorkerBuilder(Config);

/// A worker, configured; [`Worker::start`] runs it.
pub struct Worker(Config);

impl Worker {
    /// A worker on `url` (direct or through a pooler), with the defaults:
    /// concurrency 10, no prefetch, lease 30 s, poll every 1 s (jittered), rescue every
    /// 5 s, shutdown timeout 30 s, every queue, schedules fired.
    pub fn builder(url: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder(Config {
            url: url.into(),
            direct_url: None,
            pooler: Pooler::Auto,
            owner: default_owner(),
            concurrency: 10,
            prefetch: 0,
            queues: None,
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            rescue_every: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(30),
            connector: Connector::default(),
            handlers: HashMap::new(),
            on_event: None,
            cron: true,
            schedules: Vec::new(),
            schedules_force: false,
        })
    }

    /// Connects, then runs the loop on the tokio runtime until stopped.
    pub async fn start(self) -> Result<WorkerHandle, Error> {
        let stop = CancellationToken::new();
        let task = runloop::start(Arc::new(self.0), stop.clone()).await?;
        Ok(WorkerHandle { stop, task })
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{}:{}:{:x}", host, std::process::id(), crate::jitter::seed() & 0xffff)
}

impl WorkerBuilder {
    /// Handles jobs of `kind`: `f(job, token)`.  The token is cancelled when
    /// the lease is lost (the job belongs to another worker now), the job's
    /// timeout passes or the shutdown timeout ends; the handler's future is
    /// then dropped.  Only kinds with a handler are ever claimed.
    pub fn handler<F, Fut>(mut self, kind: impl Into<String>, f: F) -> WorkerBuilder
    where
        F: Fn(Job, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.0.handlers.insert(kind.into(), Arc::new(move |j, t| f(j, t).boxed()));
        self
    }

    /// Handles jobs of `kind` whose payload is a `T`: `f(payload, job,
    /// token)`, as [`WorkerBuilder::handler`] otherwise.  A payload that is
    /// not a `T` fails its attempt with a discard (no retry can change the
    /// payload), naming the job and the type.
    pub fn typed_handler<T, F, Fut>(self, kind: impl Into<String>, f: F) -> WorkerBuilder
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(T, Job, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let f = Arc::new(f);
        self.handler(kind, move |job: Job, token| {
            let f = f.clone();
            let payload = serde_json::from_value::<T>(job.payload.clone()).map_err(|e| {
                HandlerError::discard(format!("the payload of job {} is not a {}: {}", job.id,
                                              std::any::type_name::<T>(), e))
            });
            async move { f(payload?, job, token).await }
        })
    }

    /// Jobs handled at once (1 to 1,000).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.0.concurrency = n;
        self
    }

    /// Claims held beyond the handlers (0 to 1,000; default 0): up to
    /// concurrency + prefetch jobs are claimed, and those no handler runs
    /// yet wait in the worker, leased and heartbeated like running ones,
    /// until a handler is free.  Each round trip then carries more outcomes
    /// and claims, and handlers have work while the worker waits for the
    /// database: worth it for jobs much shorter than a round trip.  The
    /// price: a prefetched job is invisible to other workers, and its
    /// attempt and lease start at the claim.  A graceful stop runs the
    /// prefetched jobs too; past the shutdown timeout, those never started
    /// are given back at once (available again in 1 ms, the attempt spent).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.0.prefetch = n;
        self
    }

    /// Only these queues (default: every queue).
    pub fn queues<S: Into<String>>(mut self, q: impl IntoIterator<Item = S>) -> Self {
        self.0.queues = Some(q.into_iter().map(Into::into).collect());
        self
    }

    /// The lease of a claim (100 ms to 1 day), renewed every third of it.
    pub fn lease(mut self, d: Duration) -> Self {
        self.0.lease = d;
        self
    }

    /// The longest wait between claims when idle (jittered by up to -25 %).
    /// A claim that a limit cut short (`skiplock.limit_set`) says when the
    /// limit may have room, and the next claim is then (plus up to 20 ms),
    /// whatever this interval.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.0.poll = d;
        self
    }

    /// How often to give back expired leases (`skiplock.rescue`).
    pub fn rescue_every(mut self, d: Duration) -> Self {
        self.0.rescue_every = d;
        self
    }

    /// How long a graceful stop waits for running handlers.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.0.shutdown_timeout = d;
        self
    }

    /// The lease owner written on every claim (default host:pid:random).
    pub fn owner(mut self, o: impl Into<String>) -> Self {
        self.0.owner = o.into();
        self
    }

    /// Says what sits in front of the database (default: guess, see pooler.rs).
    pub fn pooler(mut self, p: Pooler) -> Self {
        self.0.pooler = p;
        self
    }

    /// The direct endpoint, when `url` is a pooler: a second connection
    /// there carries LISTEN and nothing else, so the worker wakes at once.
    pub fn direct_url(mut self, u: impl Into<String>) -> Self {
        self.0.direct_url = Some(u.into());
        self
    }

    /// How connections are opened (TLS).
    pub fn connector(mut self, c: Connector) -> Self {
        self.0.connector = c;
        self
    }

    /// Called for outcomes, fenced outcomes, lost leases and failed calls.
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.0.on_event = Some(Arc::new(f));
        self
    }

    /// Fires the database's due schedules (default true): every worker
    /// may, exactly one job results per fire time.  `false` for workers
    /// that should only run jobs.
    pub fn cron(mut self, on: bool) -> Self {
        self.0.cron = on;
        self
    }

    /// Declares a schedule, applied at [`Worker::start`] with the others
    /// (see [`declare_schedules`](crate::declare_schedules)): a bad one
    /// makes `start()` fail with the database's message (SQLSTATE 22023)
    /// and nothing is written; one superseded by a newer version of the
    /// application is left as it is, with a warning.
    pub fn schedule(mut self, s: Schedule) -> Self {
        self.0.schedules.push(s);
        self
    }

    /// Declares schedules; see [`WorkerBuilder::schedule`].
    pub fn schedules(mut self, s: impl IntoIterator<Item = Schedule>) -> Self {
        self.0.schedules.extend(s);
        self
    }

    /// Applies the declared schedules even where a newer definition
    /// superseded them (default false): a deliberate rollback.
    pub fn schedules_force(mut self, force: bool) -> Self {
        self.0.schedules_force = force;
        self
    }

    /// Checks the options.
    pub fn build(self) -> Result<Worker, Error> {
        let c = &self.0;
        if c.handlers.is_empty() {
            return Err(Error::invalid("a worker needs at least one handler"));
        }
        if !(1..=1000).contains(&c.concurrency) {
            return Err(Error::invalid("concurrency must be 1 to 1000"));
        }
        if c.prefetch > 1000 {
            return Err(Error::invalid("prefetch must be 0 to 1000"));
        }
        if c.lease < Duration::from_millis(100) || c.lease > Duration::from_secs(86400) {
            return Err(Error::invalid("lease must be 100 ms to 1 day"));
        }
        if c.poll.is_zero() || c.rescue_every.is_zero() {
            return Err(Error::invalid("poll and rescue intervals must be positive"));
        }
        Ok(Worker(self.0))
    }
}

/// A running worker.
pub struct WorkerHandle {
    stop: CancellationToken,
    task: JoinHandle<Result<(), Error>>,
}

impl WorkerHandle {
    /// A token that stops the worker when cancelled (claims nothing more,
    /// drains); the same as calling [`WorkerHandle::shutdown`] without waiting.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Graceful stop: claims nothing more, waits for running handlers and
    /// runs the prefetched jobs (up to the shutdown timeout; then cancels
    /// the handlers, gives back the jobs never started, and all those are
    /// retried), records their outcomes and closes the connections.
    pub async fn shutdown(self) -> Result<(), Error> {
        self.stop.cancel();
        self.join().await
    }

    /// Waits until the worker has stopped.
    pub async fn join(self) -> Result<(), Error> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(Error::protocol(format!("worker task: {}", e))),
        }
    }
}
