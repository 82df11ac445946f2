//! One job's handler, run by a runner task (runners.rs): its result, a
//! panic, its timeout or its cancelled token becomes the attempt's outcome.

use crate::job::{Job, Outcome};
use crate::config::Handler;
use futures_util::FutureExt;
use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn limit(timeout: Option<Duration>) {
    match timeout {
        Some(d) => tokio::time::sleep(d).await,
        None => futures_util::future::pending().await,
    }
}

fn panic_message(p: Box<dyn Any + Send>) -> String {
    let msg = p.downcast_ref::<&str>().map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("handler panicked: {}", msg)
}

/// Runs `h` for `job` in the calling task; returns the attempt's outcome.
/// A cancelled token (lease lost, shutdown timeout) or the job's timeout
/// drops the handler's future; a panic is caught here.
pub(crate) async fn run(h: &Handler, job: Job, token: CancellationToken) -> Outcome {
    let timeout = job.timeout;
    let handler = AssertUnwindSafe(h(job, token.clone())).catch_unwind();
    tokio::select! {
        r = handler => match r {
            Ok(r) => Outcome::from_result(r),
            Err(p) => Outcome::retry(panic_message(p)),
        },
        _ = token.cancelled() => {
            Outcome::retry("cancelled: the lease was lost or the worker stopped first")
        }
        _ = limit(timeout) => {
            token.cancel();
            Outcome::retry(format!("timed out after {} ms", timeout.unwrap_or_default().as_millis()))
        }
    }
}
