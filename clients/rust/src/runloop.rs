//! The worker loop (docs/protocol.md, "The loop"): one task that owns the
//! claims connection.  Each turn records the finished outcomes and claims
//! for the free slots in one round trip (`record_claim`), heartbeats the
//! held claims every third of the lease, rescues expired leases now and
//! then, and waits for a finished handler, a notification, a timer or the
//! stop token.  Handlers run in their own tasks, outside any transaction.
//! The claim asks for wait hints: when a limit held due jobs back, the
//! next claim is when it may have room, not the next poll.
//!
//! A claim is held from its claim until its outcome is recorded; the loop
//! hands claimed jobs to the runners (runners.rs) through their queue.
//! With `prefetch`, up to concurrency + prefetch claims are held: jobs no
//! runner has taken yet wait in the queue (heartbeated like running ones)
//! and start as handlers end, so handlers have work while the loop waits
//! for the database.  Stopping runs them too; past the shutdown timeout,
//! the ones never started are given back at once (a retry due in 1 ms).

use crate::cron::Cron;
use crate::db::Db;
use crate::error::Error;
use crate::job::{Finished, Job, Outcome, TxCompletion};
use crate::jitter::jittered;
use crate::protocol::{exchange, exchange_hinted, heartbeat, rescue, ClaimArgs};
use crate::runners::{self, Queue};
use crate::schedule::declare_schedules;
use crate::config::{Config, Event};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Duration, Instant};
use tokio_util::sync::CancellationToken;

/// After the shutdown timeout, how long cancelled handlers and the last
/// outcomes may take before the loop gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long finished outcomes may wait for more to share their round
/// trip, while fewer than half of the held claims have finished.
const BATCH_WAIT: Duration = Duration::from_millis(2);

/// The most a claim after a wait hint is delayed beyond the hint.
const WAIT_JITTER: Duration = Duration::from_millis(20);

/// The error a prefetched job that never started is given back with.
const NOT_STARTED: &str = "the worker stopped before starting it";

/// A held claim, running or waiting in the queue.
struct Held {
    token: CancellationToken,
    lost: bool,
    /// For the log line of a failed attempt.
    kind: String,
    /// The job's queue: the handle's third part, for the heartbeat.
    queue: String,
    attempt: i32,
    max_attempts: i32,
    /// The handler completed the job in its own transaction (Job::complete):
    /// a heartbeat that finds the job gone is no lost lease.
    in_tx: TxCompletion,
}

struct Loop {
    cfg: Arc<Config>,
    db: Db,
    wake: Arc<Notify>,
    stop: CancellationToken,
    kinds: Vec<String>,
    held: HashMap<(i64, i64), Held>,
    queue: Arc<Queue>,
    rx: UnboundedReceiver<Finished>,
    pending: Vec<Finished>,
    /// Pending failures of handlers that completed their job in their own
    /// transaction: refused, they count as completed, not as fenced.
    in_tx: HashSet<(i64, i64)>,
    pending_since: Option<Instant>,
    claim_due: bool,
    next_poll: Instant,
    next_heartbeat: Instant,
    next_rescue: Instant,
    cron: Cron,
    stopping_since: Option<Instant>,
}

pub(crate) async fn start(cfg: Arc<Config>, stop: CancellationToken)
                          -> Result<JoinHandle<Result<(), Error>>, Error> {
    let wake = Arc::new(Notify::new());
    let mut db = Db::open(cfg.clone(), wake.clone()).await?;
    if !cfg.schedules.is_empty() {
        let c = db.client().await.ok_or_else(|| Error::Transient {
            sqlstate: None, message: "the connection closed at start".into() })?;
        declare_schedules(c, &cfg.schedules, cfg.schedules_force).await?;
    }
    let (tx, rx) = unbounded_channel();
    let now = Instant::now();
    let mut kinds: Vec<String> = cfg.handlers.keys().cloned().collect();
    kinds.sort();
    let queue = runners::start(cfg.clone(), tx);
    let cron = Cron::new(cfg.cron);
    let mut l = Loop { cfg, db, wake, stop, kinds, held: HashMap::new(), queue, rx,
                       pending: vec![], in_tx: HashSet::new(), pending_since: None, claim_due: true, next_poll: now,
                       next_heartbeat: now, next_rescue: now, cron, stopping_since: None };
    Ok(tokio::spawn(async move { l.run().await }))
}

/// When to claim again after a claim that found no more due jobs: after the
/// poll interval (jittered), or sooner when a limit held due jobs back and
/// said when it may have room (the claim's wait hint, docs/flow-control.md),
/// spread over WAIT_JITTER so that workers sharing the limit do not claim at
/// the same instant.
fn next_poll(poll: Duration, wait: Option<Duration>) -> Instant {
    let now = Instant::now();
    let polled = now + jittered(poll);
    match wait {
        Some(w) => polled.min(now + w + WAIT_JITTER.mul_f64(crate::jitter::unit())),
        None => polled,
    }
}

/// A failed attempt, visible by default: `log::warn!` with the job's id,
/// kind and attempt and the handler's error.
fn log_failure(h: &Held, f: &Finished) {
    let (what, error) = match &f.outcome {
        Outcome::Ok(_) => return,
        Outcome::Discard { error } => ("discarded", error),
        Outcome::Retry { error, .. } if h.attempt < h.max_attempts => ("retried", error),
        Outcome::Retry { error, .. } => ("its last attempt", error),
    };
    log::warn!("skiplock worker: job {} ({}) attempt {} of {} failed ({}): {}", f.id, h.kind,
               h.attempt, h.max_attempts, what, error);
}

impl Loop {
    async fn run(&mut self) -> Result<(), Error> {
        loop {
            while let Ok(f) = self.rx.try_recv() {
                self.finish(f);
            }
            if self.stop_step() {
                return Ok(()); /* Drop closes the runners' queue */
            }
            self.exchange().await;
            self.heartbeat().await;
            self.rescue().await;
            if self.stopping_since.is_none() {
                let idle = self.idle();
                self.cron.step(&mut self.db, &self.cfg, idle).await;
            }
            self.wait().await;
        }
    }

    /// Stopping: past the shutdown timeout, gives back the jobs never
    /// started and cancels what still runs (those jobs are retried); true
    /// when the loop is done.
    fn stop_step(&mut self) -> bool {
        if self.stop.is_cancelled() && self.stopping_since.is_none() {
            self.stopping_since = Some(Instant::now());
        }
        let since = match self.stopping_since {
            Some(s) => s.elapsed(),
            None => return false,
        };
        if since >= self.cfg.shutdown_timeout {
            self.give_back();
            self.held.values().for_each(|h| h.token.cancel());
        }
        let idle = self.held.values().all(|h| h.lost) && self.pending.is_empty();
        idle || since >= self.cfg.shutdown_timeout + SHUTDOWN_GRACE
    }

    fn finish(&mut self, f: Finished) {
        if let Some(h) = self.held.get(&(f.id, f.fencing)) {
            log_failure(h, &f);
        }
        match self.held.remove(&(f.id, f.fencing)) {
            Some(h) if h.in_tx.is_set() => self.finish_in_tx(f),
            Some(h) if !h.lost => self.push_pending(f),
            _ => {} /* lost: its outcome would be fenced out anyway */
        }
    }

    /// The handler completed its job in its own transaction: nothing to
    /// record when it returned Ok (the job is finished, or, if that commit
    /// did not go through after all, still running until its lease
    /// expires); a failure is recorded, and refused when it did commit.
    fn finish_in_tx(&mut self, f: Finished) {
        if let Outcome::Ok(_) = f.outcome {
            self.cfg.event(Event::Recorded { id: f.id, state: "completed".into() });
        } else {
            self.in_tx.insert((f.id, f.fencing));
            self.push_pending(f);
        }
    }

    /// Claims that may be taken: handlers plus prefetch, less those held.
    fn free(&self) -> usize {
        (self.cfg.concurrency + self.cfg.prefetch).saturating_sub(self.held.len())
    }

    /// Past the shutdown timeout: the waiting jobs, never started, go back
    /// with the next record, due again at once for any worker.
    fn give_back(&mut self) {
        for job in self.queue.drain() {
            if self.held.remove(&(job.id, job.fencing)).is_some() {
                let outcome = Outcome::Retry { error: NOT_STARTED.into(),
                                               after: Some(Duration::from_millis(1)) };
                self.push_pending(Finished { id: job.id, fencing: job.fencing, queue: job.queue,
                                             outcome });
            }
        }
    }

    fn push_pending(&mut self, f: Finished) {
        self.pending_since.get_or_insert_with(Instant::now);
        self.pending.push(f);
    }

    /// Outcomes are sent when half the held claims have finished, when
    /// the first has waited BATCH_WAIT, or when stopping: a round trip for
    /// one outcome, while the rest are moments away, costs as much as one
    /// for all of them.
    fn outcomes_due(&self) -> bool {
        match self.pending_since {
            Some(t) => self.held.len() <= self.pending.len() || self.stopping_since.is_some()
                       || t.elapsed() >= BATCH_WAIT,
            None => false,
        }
    }

    fn wants_claim(&self) -> bool {
        self.stopping_since.is_none() && self.free() > 0
            && if self.pending.is_empty() {
                self.claim_due || Instant::now() >= self.next_poll
            } else {
                self.outcomes_due()
            }
    }

    /// Records the finished outcomes and claims, one round trip.
    async fn exchange(&mut self) {
        let claim = self.wants_claim();
        if !claim && !self.outcomes_due() {
            return;
        }
        let cfg = self.cfg.clone();
        let n = self.free().min(1000);
        let args = ClaimArgs { owner: &cfg.owner, kinds: &self.kinds, queues: cfg.queues.as_deref(),
                               n, lease: cfg.lease };
        let client = match self.db.client().await {
            Some(c) => c,
            None => return,
        };
        let done = std::mem::take(&mut self.pending);
        let since = self.pending_since.take();
        match exchange_hinted(client, &done, if claim { Some(&args) } else { None }).await {
            Ok(x) => {
                self.report(&done, x.recorded);
                if claim {
                    self.claim_due = x.jobs.len() == n;
                    self.next_poll = next_poll(cfg.poll, x.wait);
                }
                self.hold(x.jobs);
            }
            Err(e) if e.is_transient() => {
                self.pending = done;
                self.pending_since = since;
                self.db.lost(e);
            }
            Err(e) => {
                self.claim_due = false; /* a missing schema, say: try again at the next poll */
                self.next_poll = Instant::now() + cfg.poll;
                self.record_each(done, e).await;
            }
        }
    }

    /// Tells which outcomes were accepted and which were fenced out.
    fn report(&mut self, done: &[Finished], recorded: Vec<crate::protocol::Recorded>) {
        let mut by_id: HashMap<i64, String> =
            recorded.into_iter().map(|r| (r.id, r.state)).collect();
        for f in done {
            let in_tx = self.in_tx.remove(&(f.id, f.fencing));
            match by_id.remove(&f.id) {
                Some(state) => self.cfg.event(Event::Recorded { id: f.id, state }),
                None if in_tx => {
                    self.cfg.event(Event::Recorded { id: f.id, state: "completed".into() })
                }
                None => self.cfg.event(Event::Fenced(Error::Fenced { id: f.id, fencing: f.fencing })),
            }
        }
    }

    /// A batch refused as a whole (a result PostgreSQL's jsonb cannot hold,
    /// say): records each outcome alone; one still refused becomes a failed
    /// attempt that says why.
    async fn record_each(&mut self, done: Vec<Finished>, e: Error) {
        self.cfg.event(Event::Failed(e));
        for f in done {
            let client = match self.db.client().await {
                Some(c) => c,
                None => return, /* the leases expire: the jobs are rescued */
            };
            let r = match exchange(client, std::slice::from_ref(&f), None).await {
                Err(e) if !e.is_transient() => {
                    let msg = format!("the outcome could not be recorded: {}", e);
                    let g = Finished { outcome: Outcome::retry(msg), ..f.clone() };
                    exchange(client, std::slice::from_ref(&g), None).await
                }
                r => r,
            };
            match r {
                Ok((recorded, _)) => self.report(std::slice::from_ref(&f), recorded),
                Err(e) => self.cfg.event(Event::Failed(e)),
            }
        }
    }

    /// Holds newly claimed jobs and queues them for the runners.
    fn hold(&mut self, jobs: Vec<Job>) {
        let mut queued = Vec::with_capacity(jobs.len());
        for job in jobs {
            let token = CancellationToken::new();
            let in_tx = job.completed_in_tx.clone();
            self.held.insert((job.id, job.fencing), Held { token: token.clone(), lost: false, in_tx,
                                                           kind: job.kind.clone(),
                                                           queue: job.queue.clone(),
                                                           attempt: job.attempt,
                                                           max_attempts: job.max_attempts });
            queued.push((job, token));
        }
        self.queue.push(queued);
    }

    /// Every third of the lease: renews the held claims, running or
    /// waiting; a claim that was lost has its token cancelled and its
    /// outcome dropped, or is never started.
    async fn heartbeat(&mut self) {
        let now = Instant::now();
        if now < self.next_heartbeat {
            return;
        }
        self.next_heartbeat = now + self.cfg.lease / 3;
        let claims: Vec<(i64, i64, String)> = self.held.iter().filter(|(_, h)| !h.lost)
            .map(|(k, h)| (k.0, k.1, h.queue.clone())).collect();
        if claims.is_empty() {
            return;
        }
        let client = match self.db.client().await {
            Some(c) => c,
            None => return,
        };
        match heartbeat(client, &claims, self.cfg.lease).await {
            Ok(rows) => {
                for ((id, ext), (_, fencing, _)) in rows.into_iter().zip(claims) {
                    let in_tx = self.held.get(&(id, fencing)).map_or(false, |h| h.in_tx.is_set());
                    if !ext && !in_tx { /* in_tx: gone because its transaction committed */
                        self.lose(id, fencing);
                    }
                }
            }
            Err(e) if e.is_transient() => self.db.lost(e),
            Err(e) => self.cfg.event(Event::Failed(e)),
        }
    }

    fn lose(&mut self, id: i64, fencing: i64) {
        if self.queue.remove(id, fencing) {
            self.held.remove(&(id, fencing)); /* never started */
        } else if let Some(h) = self.held.get_mut(&(id, fencing)) {
            h.lost = true;
            h.token.cancel();
        } else {
            return;
        }
        self.cfg.event(Event::LeaseLost { id, fencing });
    }

    /// Now and then: gives back expired leases (any worker's).
    async fn rescue(&mut self) {
        let now = Instant::now();
        if now < self.next_rescue || self.stopping_since.is_some() {
            return;
        }
        self.next_rescue = now + self.cfg.rescue_every;
        let client = match self.db.client().await {
            Some(c) => c,
            None => return,
        };
        match rescue(client, 1000).await {
            Ok(n) => self.claim_due |= n > 0,
            Err(e) if e.is_transient() => self.db.lost(e),
            Err(e) => self.cfg.event(Event::Failed(e)),
        }
    }

    /// For cron's timing: no job held, none finished, the last claim found none.
    fn idle(&self) -> bool {
        self.held.is_empty() && self.pending.is_empty() && !self.claim_due
    }

    /// Sleeps until something happens or a timer is due.
    async fn wait(&mut self) {
        if (self.wants_claim() || self.outcomes_due()) && self.db.is_up() {
            return;
        }
        let mut due = self.next_rescue.min(self.next_poll);
        match self.cron.due_at(self.idle()) {
            /* while the connection is down, retry_at is the next step */
            Some(t) if self.stopping_since.is_none() && self.db.is_up() => due = due.min(t),
            _ => {}
        }
        if !self.held.is_empty() {
            due = due.min(self.next_heartbeat);
        }
        if let (Some(t), true) = (self.pending_since, self.db.is_up()) {
            due = due.min(t + BATCH_WAIT);
        }
        if let Some(s) = self.stopping_since {
            due = due.min(s + self.cfg.shutdown_timeout).max(Instant::now() + Duration::from_millis(50));
        }
        if !self.db.is_up() {
            due = due.min(self.db.retry_at);
        }
        let stopping = self.stopping_since.is_some();
        tokio::select! {
            Some(f) = self.rx.recv() => self.finish(f),
            _ = self.wake.notified(), if !stopping => {
                self.claim_due = true;
                self.cron.poke();
            }
            _ = self.stop.cancelled(), if !stopping => {}
            _ = sleep_until(due) => {}
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        self.queue.close();
    }
}
