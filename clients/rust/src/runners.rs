//! The handler runners: `concurrency` tasks that take claimed jobs from one
//! queue, run each job's handler (run_job.rs) and send its outcome to the
//! loop.  A runner takes the next job as soon as a handler ends, without
//! the loop, so prefetched jobs start while the loop waits for the
//! database, and no task is spawned per job.

use crate::job::{Finished, Job, Outcome};
use crate::run_job;
use crate::config::Config;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Claimed jobs no runner has taken yet, each with its token.  `ready` has
/// a permit per job pushed: a runner takes one, then a job (none when the
/// loop took it back meanwhile).
pub(crate) struct Queue {
    jobs: Mutex<VecDeque<(Job, CancellationToken)>>,
    ready: Semaphore,
}

impl Queue {
    pub fn push(&self, jobs: Vec<(Job, CancellationToken)>) {
        let n = jobs.len();
        self.jobs.lock().unwrap().extend(jobs);
        self.ready.add_permits(n);
    }

    /// Takes claim (id, fencing) back; false when a runner has it already.
    pub fn remove(&self, id: i64, fencing: i64) -> bool {
        let mut q = self.jobs.lock().unwrap();
        let before = q.len();
        q.retain(|(j, _)| (j.id, j.fencing) != (id, fencing));
        q.len() < before
    }

    /// Takes back every job no runner has started.
    pub fn drain(&self) -> Vec<Job> {
        self.jobs.lock().unwrap().drain(..).map(|(j, _)| j).collect()
    }

    /// Ends the runners once their handlers return.
    pub fn close(&self) {
        self.ready.close();
    }

    fn take(&self) -> Option<(Job, CancellationToken)> {
        self.jobs.lock().unwrap().pop_front()
    }
}

/// Starts the runners; they end when the queue is closed.
pub(crate) fn start(cfg: Arc<Config>, tx: UnboundedSender<Finished>) -> Arc<Queue> {
    let q = Arc::new(Queue { jobs: Mutex::new(VecDeque::new()), ready: Semaphore::new(0) });
    for _ in 0..cfg.concurrency {
        tokio::spawn(runner(cfg.clone(), q.clone(), tx.clone()));
    }
    q
}

async fn runner(cfg: Arc<Config>, q: Arc<Queue>, tx: UnboundedSender<Finished>) {
    while let Ok(permit) = q.ready.acquire().await {
        permit.forget();
        let (job, token) = match q.take() {
            Some(x) => x,
            None => continue,
        };
        let (id, fencing, queue) = (job.id, job.fencing, job.queue.clone());
        let outcome = match cfg.handlers.get(&job.kind) {
            Some(h) => run_job::run(h, job, token).await,
            None => Outcome::retry(format!("no handler for kind {}", job.kind)),
        };
        let _ = tx.send(Finished { id, fencing, queue, outcome });
    }
}
