//! Periodic jobs: the worker fires the due schedules of the whole database
//! with one statement, `skiplock.cron_tick()` (schema step 0024), which
//! decides the fire times, moves each due schedule on and enqueues its
//! jobs under `cron:NAME:<fire time>`: any number of workers may tick at
//! once, exactly one job results per fire time (docs/cron.md).
//!
//! When to tick, as the C worker does (worker_loop.c): at start, then when
//! the earliest schedule is next due (`next_due - db_now`, the database's
//! clock, never ours), at least [`MIN_GAP`] apart; at most [`BUSY_MAX`]
//! apart while the worker holds or finds jobs, at most [`IDLE_MAX`] apart
//! while it is idle.  A notification (LISTEN: a schedule changed, a job
//! arrived) brings an idle worker's tick forward to [`MIN_GAP`] after the
//! last, so a flood of them costs at most one tick a second.  The caps are
//! jittered so that a fleet's ticks spread.  A failed tick, or schedules
//! the tick could not evaluate, is logged at most once a minute and never
//! stops the worker; a transient error drops the connection like any
//! other call (db.rs reopens it) and the tick is tried again.

use crate::config::{Config, Event};
use crate::conn::select;
use crate::db::Db;
use crate::error::Error;
use crate::jitter::jittered;
use tokio::time::{Duration, Instant};
use tokio_postgres::Client;

/// The shortest gap between two ticks of one worker.
const MIN_GAP: Duration = Duration::from_secs(1);
/// The longest gap while the worker is busy: a schedule added meanwhile
/// (and not heard of) is seen within it.
const BUSY_MAX: Duration = Duration::from_secs(5);
/// The longest gap while the worker is idle: about 12 ticks an hour.
const IDLE_MAX: Duration = Duration::from_secs(300);
/// The gap after a tick that failed with a permanent error.
const FAILED_GAP: Duration = Duration::from_secs(5);
/// Warnings about ticks, at most one per this.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// One tick's answer.
#[derive(Debug)]
struct Tick {
    fired: i32,
    enqueued: i64,
    failed: i32,
    failure: Option<String>,
    /// `next_due - db_now`, in ms (may be negative); None: no schedule.
    next_in_ms: Option<i64>,
}

const TICK: &str = "SELECT fired, enqueued, failed, failure, \
                    round(extract(epoch FROM next_due - db_now) * 1000) FROM skiplock.cron_tick()";

async fn tick(c: &Client) -> Result<Tick, Error> {
    let rows = select(c, TICK).await?;
    let r = rows.first().ok_or_else(|| Error::protocol("cron_tick returned no row"))?;
    let num = |i: usize| -> Result<i64, Error> {
        r.get(i).unwrap_or("0").parse()
            .map_err(|_| Error::protocol(format!("cron_tick: column {} is not a number", i)))
    };
    Ok(Tick { fired: num(0)? as i32, enqueued: num(1)?, failed: num(2)? as i32,
              failure: r.get(3).map(String::from),
              next_in_ms: match r.get(4) { Some(_) => Some(num(4)?), None => None } })
}

/// The worker's cron: when the next tick is due, and the tick itself.
pub(crate) struct Cron {
    enabled: bool,
    /// Due at start.
    first: bool,
    /// When the next tick is due, busy or idle; `soon` after a notification.
    busy_at: Instant,
    idle_at: Instant,
    soon_at: Instant,
    poked: bool,
    warned: Option<Instant>,
}

impl Cron {
    pub fn new(enabled: bool) -> Cron {
        let now = Instant::now();
        Cron { enabled, first: true, busy_at: now, idle_at: now, soon_at: now, poked: false,
               warned: None }
    }

    /// A notification was heard (or may have been missed): an idle
    /// worker ticks soon, in case a schedule changed.
    pub fn poke(&mut self) {
        self.poked = true;
    }

    /// When the next tick is due; None when cron is off.
    pub fn due_at(&self, idle: bool) -> Option<Instant> {
        match (self.enabled, self.first, idle, self.poked) {
            (false, ..) => None,
            (true, true, ..) => Some(self.busy_at),
            (true, false, false, _) => Some(self.busy_at),
            (true, false, true, true) => Some(self.soon_at),
            (true, false, true, false) => Some(self.idle_at),
        }
    }

    /// Sets the next tick after one sent at `sent`: by `next_in` (None:
    /// no schedule), at least MIN_GAP later, at most the jittered caps.
    fn plan(&mut self, sent: Instant, next_in: Option<Duration>) {
        let (busy, idle) = (jittered(BUSY_MAX), jittered(IDLE_MAX));
        let gap = |cap: Duration| next_in.map_or(cap, |d| d.min(cap)).max(MIN_GAP);
        self.busy_at = sent + gap(busy);
        self.idle_at = sent + gap(idle);
        self.soon_at = sent + MIN_GAP;
        self.first = false;
        self.poked = false;
    }

    /// Ticks when due: `idle` when the worker holds no job and its last
    /// claim found none.
    pub async fn step(&mut self, db: &mut Db, cfg: &Config, idle: bool) {
        match self.due_at(idle) {
            Some(t) if Instant::now() >= t => {}
            _ => return,
        }
        let client = match db.client().await {
            Some(c) => c,
            None => return, /* due again once the connection is back */
        };
        let sent = Instant::now();
        match tick(client).await {
            Ok(t) => {
                self.plan(sent, t.next_in_ms.map(|ms| Duration::from_millis(ms.max(0) as u64)));
                if t.failed > 0 {
                    self.warn(&format!("{} schedule(s) failed: {}", t.failed,
                                       t.failure.as_deref().unwrap_or("")));
                }
                cfg.event(Event::CronTicked { fired: t.fired, enqueued: t.enqueued, failed: t.failed });
            }
            Err(e) => {
                self.warn(&e.to_string());
                let transient = e.is_transient();
                self.plan(sent, Some(if transient { MIN_GAP } else { FAILED_GAP }));
                if transient {
                    db.lost(e);
                } else {
                    cfg.event(Event::Failed(e));
                }
            }
        }
    }

    fn warn(&mut self, what: &str) {
        if self.warned.map_or(true, |t| t.elapsed() >= WARN_EVERY) {
            self.warned = Some(Instant::now());
            log::warn!("skiplock worker: cron: {}", what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(c: &Cron, idle: bool, from: Instant) -> f64 {
        c.due_at(idle).expect("enabled").duration_since(from).as_secs_f64()
    }

    #[test]
    fn timing() {
        let mut c = Cron::new(true);
        let t = Instant::now();
        assert!(c.due_at(true).unwrap() <= t, "due at start");
        c.plan(t, Some(Duration::from_millis(200)));
        assert_eq!(secs(&c, false, t), 1.0, "at least a second apart");
        assert_eq!(secs(&c, true, t), 1.0);
        c.plan(t, Some(Duration::from_secs(3)));
        assert_eq!(secs(&c, false, t), 3.0, "by next_due");
        c.plan(t, Some(Duration::from_secs(3600)));
        let (busy, idle) = (secs(&c, false, t), secs(&c, true, t));
        assert!((3.75..=5.0).contains(&busy), "busy: at most 5 s apart, jittered: {}", busy);
        assert!((225.0..=300.0).contains(&idle), "idle: at most 5 min apart, jittered: {}", idle);
        c.poke();
        assert_eq!(secs(&c, true, t), 1.0, "a notification: a second after the last");
        assert_eq!(secs(&c, false, t), busy, "busy: no sooner than planned");
        c.plan(t, None);
        assert!(secs(&c, true, t) >= 225.0, "no schedule: the cap");
        assert!(Cron::new(false).due_at(true).is_none(), "off");
    }
}
