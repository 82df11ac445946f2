//! What the worker's parts share: its settings, its handlers and the events
//! it reports.  The worker (worker.rs) builds a [`Config`]; the run loop,
//! the runners and the connection read it.  This module uses none of them.

use crate::conn::Connector;
use crate::error::Error;
use crate::job::{HandlerError, Job};
use crate::pooler::Pooler;
use crate::schedule::Schedule;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a handler returns: the job's result, or a failed attempt.
pub type HandlerResult = Result<serde_json::Value, HandlerError>;

pub(crate) type Handler =
    Arc<dyn Fn(Job, CancellationToken) -> BoxFuture<'static, HandlerResult> + Send + Sync>;

/// The callback [`WorkerBuilder::on_event`](crate::WorkerBuilder::on_event)
/// installs, called with each [`Event`] inline on the worker's loop: one
/// that blocks delays the worker's heartbeats and outcomes.
pub type EventHook = Arc<dyn Fn(&Event) + Send + Sync>;

/// Something the worker noticed; see
/// [`WorkerBuilder::on_event`](crate::WorkerBuilder::on_event).
#[derive(Debug)]
pub enum Event {
    /// The outcome was accepted: the job's new state.  Also `completed`
    /// for a job its handler completed in its own transaction
    /// ([`Job::complete`]), whose outcome the worker does not send (or
    /// whose later failure was refused because that transaction committed).
    Recorded { id: i64, state: String },
    /// The outcome was refused: the claim was no longer current.
    Fenced(Error),
    /// A heartbeat found the job lost; its token was cancelled.
    LeaseLost { id: i64, fencing: i64 },
    /// LISTEN succeeded: on the worker's own (direct) connection, or on a
    /// side connection to the direct endpoint (`side`).
    Listening { side: bool },
    /// A call failed (transient ones are retried after a reconnect).
    Failed(Error),
    /// `skiplock.cron_tick()` ran: the schedules it fired, the jobs it
    /// enqueued and the schedules it could not evaluate.
    CronTicked { fired: i32, enqueued: i64, failed: i32 },
}

pub(crate) struct Config {
    pub url: String,
    pub direct_url: Option<String>,
    pub pooler: Pooler,
    pub owner: String,
    pub concurrency: usize,
    pub prefetch: usize,
    pub queues: Option<Vec<String>>,
    pub lease: Duration,
    pub poll: Duration,
    pub rescue_every: Duration,
    pub shutdown_timeout: Duration,
    pub connector: Connector,
    pub handlers: HashMap<String, Handler>,
    pub on_event: Option<EventHook>,
    /// Fire the due schedules (cron.rs).
    pub cron: bool,
    /// Declared at start (schedule.rs), forced or not.
    pub schedules: Vec<Schedule>,
    pub schedules_force: bool,
}

impl Config {
    pub(crate) fn event(&self, e: Event) {
        match &self.on_event {
            Some(f) => f(&e),
            None => log::debug!("{:?}", e),
        }
    }
}
