//! The worker's connections: one for claims, outcomes, heartbeats and
//! rescues whatever the concurrency, reopened with backoff when lost; and,
//! through a pooler with a known direct endpoint, one more that only
//! LISTENs.  A worker therefore holds at most two server connections.

use crate::conn::select;
use crate::error::Error;
use crate::pooler::{is_direct, Pooler};
use crate::protocol::check_schema;
use crate::config::{Config, Event};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};
use tokio_postgres::Client;

const LISTEN: &str = "LISTEN skiplock_jobs";
const LISTEN_RETRY: Duration = Duration::from_secs(30);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub(crate) struct Db {
    cfg: Arc<Config>,
    wake: Arc<Notify>,
    client: Option<Client>,
    side: Option<Client>,
    side_retry_at: Instant,
    listening: bool,
    backoff: Duration,
    pub retry_at: Instant,
}

impl Db {
    /// Opens the claims connection (errors are the caller's: a bad URL, no
    /// schema) and starts listening where that is safe.
    pub async fn open(cfg: Arc<Config>, wake: Arc<Notify>) -> Result<Db, Error> {
        let now = Instant::now();
        let mut db = Db { cfg, wake, client: None, side: None, side_retry_at: now, listening: false,
                          backoff: Duration::from_millis(100), retry_at: now };
        db.connect().await?;
        if let Some(c) = db.client.as_ref() {
            check_schema(c).await?;
        }
        Ok(db)
    }

    async fn connect(&mut self) -> Result<(), Error> {
        self.listening = false;
        let c = self.cfg.connector.connect(&self.cfg.url, self.wake.clone()).await?;
        if self.cfg.pooler != Pooler::Pooled && is_direct(&c, &self.cfg.url, self.cfg.pooler).await? {
            match select(&c, LISTEN).await {
                Ok(_) => {
                    self.listening = true;
                    self.cfg.event(Event::Listening { side: false });
                }
                Err(e) => self.cfg.event(Event::Failed(e)),
            }
        }
        self.client = Some(c);
        self.backoff = Duration::from_millis(100);
        Ok(())
    }

    pub fn is_up(&self) -> bool {
        self.client.as_ref().map_or(false, |c| !c.is_closed())
    }

    /// The claims connection, reopened when due; None while it is down.
    /// After a reconnect the worker claims at once: what was enqueued
    /// meanwhile sent no notification it could hear.
    pub async fn client(&mut self) -> Option<&Client> {
        if !self.is_up() && Instant::now() >= self.retry_at {
            match self.connect().await {
                Ok(()) => self.wake.notify_one(),
                Err(e) => self.lost(e),
            }
        }
        self.side_listen().await;
        self.client.as_ref().filter(|c| !c.is_closed())
    }

    /// Drops the claims connection after a failed call; reopened later.
    pub fn lost(&mut self, e: Error) {
        self.cfg.event(Event::Failed(e));
        self.client = None;
        self.listening = false;
        self.retry_at = Instant::now() + self.backoff.mul_f64(0.5 + 0.5 * crate::jitter::unit());
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    /// Through a pooler: (re)opens the LISTEN connection on the direct
    /// endpoint, at most every LISTEN_RETRY.
    async fn side_listen(&mut self) {
        let direct = match &self.cfg.direct_url {
            Some(u) if !self.listening && self.is_up() => u.clone(),
            _ => return,
        };
        if self.side.as_ref().map_or(false, |c| !c.is_closed()) || Instant::now() < self.side_retry_at {
            return;
        }
        self.side_retry_at = Instant::now() + LISTEN_RETRY;
        match self.cfg.connector.connect(&direct, self.wake.clone()).await {
            Ok(c) => match select(&c, LISTEN).await {
                Ok(_) => {
                    self.side = Some(c);
                    self.cfg.event(Event::Listening { side: true });
                    self.wake.notify_one(); /* claim: nothing was heard meanwhile */
                }
                Err(e) => self.cfg.event(Event::Failed(e)),
            },
            Err(e) => self.cfg.event(Event::Failed(e)),
        }
    }
}
