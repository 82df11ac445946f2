//! One job's handler, in its own task: its result, a panic, its timeout or
//! its cancelled token becomes the attempt's outcome.

use crate::job::{Finished, Job, Outcome};
use crate::worker::Handler;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

async fn limit(timeout: Option<Duration>) {
    match timeout {
        Some(d) => tokio::time::sleep(d).await,
        None => futures_util::future::pending().await,
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return "handler task was cancelled".into();
    }
    let p = e.into_panic();
    let msg = p.downcast_ref::<&str>().map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("handler panicked: {}", msg)
}

/// Runs `h` for `job`; sends the outcome on `tx`.  A cancelled token (lease
/// lost, shutdown timeout) or the job's timeout drops the handler's future.
pub(crate) async fn run(h: Handler, job: Job, token: CancellationToken,
                        tx: UnboundedSender<Finished>) {
    let (id, fencing, timeout) = (job.id, job.fencing, job.timeout);
    let mut task = tokio::spawn(h(job, token.clone()));
    let outcome = tokio::select! {
        r = &mut task => match r {
            Ok(r) => Outcome::from_result(r),
            Err(e) => Outcome::retry(panic_message(e)),
        },
        _ = token.cancelled() => {
            task.abort();
            Outcome::retry("cancelled: the lease was lost or the worker stopped first")
        }
        _ = limit(timeout) => {
            token.cancel();
            task.abort();
            Outcome::retry(format!("timed out after {} ms", timeout.unwrap_or_default().as_millis()))
        }
    };
    let _ = tx.send(Finished { id, fencing, outcome });
}
