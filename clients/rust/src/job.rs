//! A claimed job, what a handler returns, and the outcome the worker records.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A job as the claim handed it over.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub payload: serde_json::Value,
    /// 1 on the first run.
    pub attempt: i32,
    pub max_attempts: i32,
    /// This claim's token: pass it to `job_fence` in the handler's own
    /// transaction to make its effect exactly-once.
    pub fencing: i64,
    /// The job's own time limit, if it has one.
    pub timeout: Option<Duration>,
    pub priority: i32,
    /// Set by [`Job::complete`]; the worker reads it (shared by the clones
    /// of one claimed job).  A job made by hand takes
    /// `TxCompletion::default()`.
    pub completed_in_tx: TxCompletion,
}

/// Whether a handler completed its job in its own transaction
/// ([`Job::complete`]).
#[derive(Clone, Debug, Default)]
pub struct TxCompletion(Arc<AtomicBool>);

impl TxCompletion {
    /// True once [`Job::complete`] succeeded for this claim.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Marks the claim completed in the handler's transaction
    /// ([`Job::complete`], in the protocol module).
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A failed attempt.  `?` turns any error into a retryable one, and keeps
/// its causes (its `source()` chain) for the job's error history.
#[derive(Debug)]
pub struct HandlerError {
    pub(crate) message: String,
    /// The Display of each error in the source chain, outermost first.
    pub(crate) causes: Vec<String>,
    pub(crate) discard: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl HandlerError {
    /// A failed attempt, retried after the retry decision (or discarded
    /// after the last attempt).
    pub fn retry(message: impl Into<String>) -> HandlerError {
        HandlerError { message: message.into(), causes: vec![], discard: false, retry_after: None }
    }

    /// A failure retrying cannot fix: the job is discarded now.
    pub fn discard(message: impl Into<String>) -> HandlerError {
        HandlerError { message: message.into(), causes: vec![], discard: true, retry_after: None }
    }

    /// The handler's own delay before the retry (an HTTP Retry-After).
    pub fn after(mut self, delay: Duration) -> HandlerError {
        self.retry_after = Some(delay);
        self
    }

    /// The error's message (its Display), without its causes.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The text the job's error history keeps for this attempt: the
    /// message, then one `caused by: ...` line for each cause.
    pub(crate) fn text(&self) -> String {
        let mut text = self.message.clone();
        for c in &self.causes {
            text.push_str("\ncaused by: ");
            text.push_str(c);
        }
        text
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(e: E) -> HandlerError {
        let mut h = HandlerError::retry(e.to_string());
        let mut source = e.source();
        while let Some(s) = source {
            h.causes.push(s.to_string());
            source = s.source();
        }
        h
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The result of one attempt, as `skiplock.record` takes it.
#[derive(Clone, Debug)]
pub enum Outcome {
    Ok(serde_json::Value),
    Retry { error: String, after: Option<Duration> },
    Discard { error: String },
}

impl Outcome {
    pub(crate) fn from_result(r: Result<serde_json::Value, HandlerError>) -> Outcome {
        match r {
            Ok(v) => Outcome::Ok(v),
            Err(e) if e.discard => Outcome::Discard { error: e.text() },
            Err(e) => Outcome::Retry { error: e.text(), after: e.retry_after },
        }
    }

    pub(crate) fn retry(error: impl Into<String>) -> Outcome {
        Outcome::Retry { error: error.into(), after: None }
    }
}

/// An outcome for one claim, addressed by its handle (queue, id, fencing):
/// the queue is the handle's third part since protocol 2 (schema step
/// 0027), so that the outcome finds its job where it lives.
#[derive(Clone, Debug)]
pub struct Finished {
    pub id: i64,
    pub fencing: i64,
    pub queue: String,
    pub outcome: Outcome,
}

#[cfg(test)]
mod tests {
    use super::HandlerError;
    use std::fmt;

    #[derive(Debug)]
    struct Chain(&'static str, Option<Box<Chain>>);

    impl fmt::Display for Chain {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chain {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn the_text_is_the_message_then_each_cause() {
        let e = HandlerError::from(Chain("a", Some(Box::new(Chain("b", Some(Box::new(Chain("c", None))))))));
        assert_eq!((e.message(), e.text().as_str()), ("a", "a\ncaused by: b\ncaused by: c"));
        let e = HandlerError::from(Chain("alone", None));
        assert_eq!(e.text(), "alone");
        assert_eq!(HandlerError::discard("gone").after(std::time::Duration::ZERO).text(), "gone");
    }
}
