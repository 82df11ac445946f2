//! skiplock for Rust: enqueue jobs inside your own transaction, and run a
//! worker whose every step is one call of skiplock's SQL protocol (claim,
//! heartbeat, record, rescue), so the retry policy and the fencing live in
//! the database, the same for every client.
//!
//! Every statement is sent as a simple query (see [`sql`]): the crate works
//! through PgBouncer in transaction mode, Neon's `-pooler` endpoint and
//! Supavisor as well as on a direct connection.
//!
//! ```no_run
//! # async fn demo() -> Result<(), skiplock::Error> {
//! use skiplock::{Worker, HandlerError};
//! let handle = Worker::builder("postgresql://app@db/app")
//!     .concurrency(16)
//!     .handler("email.send", |job, _cancel| async move {
//!         let to = job.payload["to"].as_str().ok_or_else(|| HandlerError::discard("no to"))?;
//!         Ok(serde_json::json!({ "sent_to": to }))
//!     })
//!     .build()?
//!     .start()
//!     .await?;
//! // ... on SIGTERM:
//! handle.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Dependencies (docs/flow-control.md): a job may wait for others
//! ([`EnqueueOptions::depends_on`], [`EnqueueOptions::depends_on_keys`],
//! [`OnParentFailure`]), and [`enqueue_batch`] runs a callback once after a
//! batch; [`waits_for`] says why a job is not running yet.  A diamond, in
//! the caller's transaction:
//!
//! ```no_run
//! # async fn demo(tx: &tokio_postgres::Transaction<'_>) -> Result<(), skiplock::Error> {
//! use serde_json::json;
//! use skiplock::{enqueue, EnqueueOptions};
//! let a = enqueue(tx, "extract", &json!({}), &EnqueueOptions::default()).await?;
//! let after = |ids: Vec<i64>| EnqueueOptions { depends_on: ids, ..Default::default() };
//! let b = enqueue(tx, "transform", &json!({"part": 1}), &after(vec![a])).await?;
//! let c = enqueue(tx, "transform", &json!({"part": 2}), &after(vec![a])).await?;
//! let d = enqueue(tx, "load", &json!({}), &after(vec![b, c])).await?; // once, after B and C
//! assert_eq!(skiplock::waits_for(tx, d).await?.as_deref(),
//!            Some("dependencies: 2 of 2 parent(s) not finished"));
//! # Ok(()) }
//! ```

mod config;
mod conn;
mod cron;
mod db;
mod deps;
mod enqueue;
mod enqueue_many;
mod error;
mod held;
pub mod idem;
mod init;
mod jitter;
mod job;
mod lease;
mod pooler;
mod renew;
pub mod protocol;
mod run_job;
mod runloop;
mod runners;
mod schedule;
mod singleton;
mod slot;
pub mod sql;
mod worker;

pub use conn::Connector;
pub use deps::{enqueue_batch, enqueue_batch_sql, waits_for, BatchOptions};
pub use enqueue::{enqueue, enqueue_sql, Backoff, EnqueueOptions, OnParentFailure};
pub use enqueue_many::{enqueue_many, enqueue_many_sql, JobSpec};
pub use error::{sqlstate_is_transient, Error};
pub use init::{init, INSTALL_SQL};
pub use idem::{idempotent, Fingerprint, IdemOptions, Idempotent, StoredResponse};
pub use job::{Finished, HandlerError, Job, Outcome, TxCompletion};
pub use lease::{Lease, LeaseGuard, Leases, LEASE_NAME_MAX, LEASE_TTL_MAX, LEASE_TTL_MIN};
pub use schedule::{declare_schedules, CatchUp, DeclareAction, Declared, Schedule};
pub use pooler::{url_looks_pooled, Pooler};
pub use protocol::{check_schema, job_complete, job_fence, MIN_SCHEMA};
pub use tokio_util::sync::CancellationToken;
pub use worker::{Event, EventHook, HandlerResult, Worker, WorkerBuilder, WorkerHandle};
