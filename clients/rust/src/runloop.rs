//! The worker loop (docs/protocol.md, "The loop"): one task that owns the
//! claims connection.  Each turn records the finished outcomes and claims
//! for the free slots in one round trip (`record_claim`), heartbeats the
//! running claims every third of the lease, rescues expired leases now and
//! then, and waits for a finished handler, a notification, a timer or the
//! stop token.  Handlers run in their own tasks, outside any transaction.

use crate::db::Db;
use crate::error::Error;
use crate::job::{Finished, Job};
use crate::jitter::jittered;
use crate::protocol::{exchange, heartbeat, rescue, ClaimArgs};
use crate::run_job;
use crate::worker::{Config, Event};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Duration, Instant};
use tokio_util::sync::CancellationToken;

/// After the shutdown timeout, how long cancelled handlers and the last
/// outcomes may take before the loop gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

struct Running {
    token: CancellationToken,
    lost: bool,
}

struct Loop {
    cfg: Arc<Config>,
    db: Db,
    wake: Arc<Notify>,
    stop: CancellationToken,
    kinds: Vec<String>,
    running: HashMap<(i64, i64), Running>,
    tx: UnboundedSender<Finished>,
    rx: UnboundedReceiver<Finished>,
    pending: Vec<Finished>,
    claim_due: bool,
    next_poll: Instant,
    next_heartbeat: Instant,
    next_rescue: Instant,
    stopping_since: Option<Instant>,
}

pub(crate) async fn start(cfg: Arc<Config>, stop: CancellationToken)
                          -> Result<JoinHandle<Result<(), Error>>, Error> {
    let wake = Arc::new(Notify::new());
    let db = Db::open(cfg.clone(), wake.clone()).await?;
    let (tx, rx) = unbounded_channel();
    let now = Instant::now();
    let mut kinds: Vec<String> = cfg.handlers.keys().cloned().collect();
    kinds.sort();
    let mut l = Loop { cfg, db, wake, stop, kinds, running: HashMap::new(), tx, rx,
                       pending: vec![], claim_due: true, next_poll: now, next_heartbeat: now,
                       next_rescue: now, stopping_since: None };
    Ok(tokio::spawn(async move { l.run().await }))
}

impl Loop {
    async fn run(&mut self) -> Result<(), Error> {
        loop {
            while let Ok(f) = self.rx.try_recv() {
                self.finish(f);
            }
            if self.stop_step() {
                return Ok(());
            }
            self.exchange().await;
            self.heartbeat().await;
            self.rescue().await;
            self.wait().await;
        }
    }

    /// Stopping: past the shutdown timeout, cancels what still runs (those
    /// jobs are retried); true when the loop is done.
    fn stop_step(&mut self) -> bool {
        if self.stop.is_cancelled() && self.stopping_since.is_none() {
            self.stopping_since = Some(Instant::now());
        }
        let since = match self.stopping_since {
            Some(s) => s.elapsed(),
            None => return false,
        };
        if since >= self.cfg.shutdown_timeout {
            self.running.values().for_each(|r| r.token.cancel());
        }
        let idle = self.running.values().all(|r| r.lost) && self.pending.is_empty();
        idle || since >= self.cfg.shutdown_timeout + SHUTDOWN_GRACE
    }

    fn finish(&mut self, f: Finished) {
        match self.running.remove(&(f.id, f.fencing)) {
            Some(r) if !r.lost => self.pending.push(f),
            _ => {} /* lost: its outcome would be fenced out anyway */
        }
    }

    fn free(&self) -> usize {
        self.cfg.concurrency.saturating_sub(self.running.len())
    }

    fn wants_claim(&self) -> bool {
        self.stopping_since.is_none() && self.free() > 0
            && (self.claim_due || !self.pending.is_empty() || Instant::now() >= self.next_poll)
    }

    /// Records the finished outcomes and claims, one round trip.
    async fn exchange(&mut self) {
        let claim = self.wants_claim();
        if !claim && self.pending.is_empty() {
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
        match exchange(client, &done, if claim { Some(&args) } else { None }).await {
            Ok((recorded, jobs)) => {
                self.report(&done, recorded);
                if claim {
                    self.claim_due = jobs.len() == n;
                    self.next_poll = Instant::now() + jittered(cfg.poll);
                }
                jobs.into_iter().for_each(|j| self.spawn(j));
            }
            Err(e) if e.is_transient() => {
                self.pending = done;
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
    fn report(&self, done: &[Finished], recorded: Vec<crate::protocol::Recorded>) {
        let mut by_id: HashMap<i64, String> =
            recorded.into_iter().map(|r| (r.id, r.state)).collect();
        for f in done {
            match by_id.remove(&f.id) {
                Some(state) => self.cfg.event(Event::Recorded { id: f.id, state }),
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
                    let g = Finished { outcome: crate::job::Outcome::retry(msg), ..f.clone() };
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

    fn spawn(&mut self, job: Job) {
        let token = CancellationToken::new();
        self.running.insert((job.id, job.fencing), Running { token: token.clone(), lost: false });
        match self.cfg.handlers.get(&job.kind) {
            Some(h) => {
                tokio::spawn(run_job::run(h.clone(), job, token, self.tx.clone()));
            }
            None => {
                let outcome = crate::job::Outcome::retry(format!("no handler for kind {}", job.kind));
                let _ = self.tx.send(Finished { id: job.id, fencing: job.fencing, outcome });
            }
        }
    }

    /// Every third of the lease: renews the running claims; a claim that
    /// was lost has its token cancelled and its outcome dropped.
    async fn heartbeat(&mut self) {
        let now = Instant::now();
        if now < self.next_heartbeat {
            return;
        }
        self.next_heartbeat = now + self.cfg.lease / 3;
        let claims: Vec<(i64, i64)> =
            self.running.iter().filter(|(_, r)| !r.lost).map(|(k, _)| *k).collect();
        if claims.is_empty() {
            return;
        }
        let client = match self.db.client().await {
            Some(c) => c,
            None => return,
        };
        match heartbeat(client, &claims, self.cfg.lease).await {
            Ok(rows) => {
                for ((id, ext), (_, fencing)) in rows.into_iter().zip(claims) {
                    if !ext {
                        self.lose(id, fencing);
                    }
                }
            }
            Err(e) if e.is_transient() => self.db.lost(e),
            Err(e) => self.cfg.event(Event::Failed(e)),
        }
    }

    fn lose(&mut self, id: i64, fencing: i64) {
        if let Some(r) = self.running.get_mut(&(id, fencing)) {
            r.lost = true;
            r.token.cancel();
            self.cfg.event(Event::LeaseLost { id, fencing });
        }
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

    /// Sleeps until something happens or a timer is due.
    async fn wait(&mut self) {
        if self.wants_claim() && self.db.is_up() {
            return;
        }
        let mut due = self.next_rescue.min(self.next_poll);
        if !self.running.is_empty() {
            due = due.min(self.next_heartbeat);
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
            _ = self.wake.notified(), if !stopping => self.claim_due = true,
            _ = self.stop.cancelled(), if !stopping => {}
            _ = sleep_until(due) => {}
        }
    }
}
