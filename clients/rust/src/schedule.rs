//! Schedules declared in code (docs/cron.md, "Schedules declared in
//! code"): what a [`Schedule`] is, and the one call that applies a list of
//! them, `skiplock.schedules_declare` (schema step 0025).  The database
//! checks every field and answers for each schedule whether it was created,
//! updated, left unchanged or superseded by a newer definition; a bad one
//! fails the whole call (SQLSTATE 22023) and nothing is written.

use crate::conn::select;
use crate::error::Error;
use crate::sql;
use serde_json::{json, Map, Value};
use tokio_postgres::GenericClient;

/// What a schedule does with the fire times it missed while no worker ran
/// (docs/cron.md, "Catch-up after downtime").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// Skip them all.
    None,
    /// Enqueue the newest only (the database's default).
    Latest,
    /// Enqueue each of them, the newest 100 at most.
    All,
}

impl CatchUp {
    fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
        }
    }
}

/// A periodic job declared in code: every fire time of `expression`
/// enqueues one job of `kind`.  Fields left unset take the database's
/// defaults (zone UTC, queue `default`, payload `{}`, priority 0, 25
/// attempts, catch-up [`CatchUp::Latest`]).  Nothing is checked here: the
/// database checks everything, in the words of `skiplock cron apply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    spec: Map<String, Value>,
}

impl Schedule {
    /// `name` (1 to 128 bytes, unique in the database), a five-field cron
    /// expression, a macro (`@daily`) or `@every 30s`, and the job kind.
    pub fn new(name: impl Into<String>, expression: impl Into<String>, kind: impl Into<String>)
               -> Schedule {
        let mut spec = Map::new();
        spec.insert("name".into(), Value::String(name.into()));
        spec.insert("expression".into(), Value::String(expression.into()));
        spec.insert("kind".into(), Value::String(kind.into()));
        Schedule { spec }
    }

    fn set(mut self, key: &str, v: Value) -> Schedule {
        self.spec.insert(key.into(), v);
        self
    }

    /// The IANA time zone the expression is read in (default UTC).
    pub fn zone(self, zone: impl Into<String>) -> Schedule {
        self.set("zone", Value::String(zone.into()))
    }

    /// The queue of its jobs (default `default`).
    pub fn queue(self, queue: impl Into<String>) -> Schedule {
        self.set("queue", Value::String(queue.into()))
    }

    /// The payload of its jobs (default `{}`).
    pub fn payload(self, payload: Value) -> Schedule {
        self.set("payload", payload)
    }

    /// The priority of its jobs (default 0).
    pub fn priority(self, priority: i32) -> Schedule {
        self.set("priority", json!(priority))
    }

    /// The attempts of each of its jobs (default 25).
    pub fn max_attempts(self, n: i32) -> Schedule {
        self.set("max_attempts", json!(n))
    }

    /// The catch-up policy (default [`CatchUp::Latest`]).
    pub fn catch_up(self, policy: CatchUp) -> Schedule {
        self.set("catch_up", Value::String(policy.as_str().into()))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.spec.get("name").and_then(Value::as_str).unwrap_or("")
    }

    /// The JSON object `skiplock.schedules_declare` reads.
    pub fn to_json(&self) -> Value {
        Value::Object(self.spec.clone())
    }
}

/// What `skiplock.schedules_declare` did with one schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclareAction {
    /// There was no schedule of that name.
    Created,
    /// The definition was new to the database: applied.
    Updated,
    /// The definition is the stored one.
    Unchanged,
    /// The definition was declared before and replaced since (an older
    /// version of the application): not applied.  Force it to roll back.
    Superseded,
}

/// One schedule's answer from [`declare_schedules`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    pub action: DeclareAction,
    /// Why, for [`DeclareAction::Superseded`]: which definition was kept.
    pub detail: Option<String>,
}

fn action(s: &str) -> Result<DeclareAction, Error> {
    Ok(match s {
        "created" => DeclareAction::Created,
        "updated" => DeclareAction::Updated,
        "unchanged" => DeclareAction::Unchanged,
        "superseded" => DeclareAction::Superseded,
        other => return Err(Error::protocol(format!("schedules_declare: unknown action {:?}", other))),
    })
}

/// Applies `schedules` (`skiplock.schedules_declare`, one statement, one
/// transaction): created, updated, unchanged or superseded, one answer per
/// schedule; the schedules not given are left alone.  `force` applies a
/// superseded definition too (a deliberate rollback).  Each superseded one
/// is logged as a warning with the database's detail.
///
/// A bad schedule fails the call with [`Error::Permanent`], SQLSTATE
/// 22023 and the database's message as it is (`schedule 1 ("nightly"):
/// invalid cron expression "30 25 * * *": hour field, character 4: 25 is
/// out of range 0-23`); nothing is written.  [`crate::WorkerBuilder::schedule`]
/// declares at `start()`; this is for applications that declare without
/// running a worker.
pub async fn declare_schedules<C: GenericClient + Sync>(
    c: &C,
    schedules: &[Schedule],
    force: bool,
) -> Result<Vec<Declared>, Error> {
    let list = Value::Array(schedules.iter().map(Schedule::to_json).collect());
    let q = format!("SELECT name, action, detail \
                     FROM skiplock.schedules_declare(schedules => {}, force => {})",
                    sql::jsonb(&list)?, force);
    let rows = select(c.client(), &q).await.map_err(bad_schedule)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let d = Declared { name: r.get(0).unwrap_or("").to_string(), action: action(r.get(1).unwrap_or(""))?,
                           detail: r.get(2).map(String::from) };
        if d.action == DeclareAction::Superseded {
            log::warn!("skiplock: schedule \"{}\" superseded, not applied: {}", d.name,
                       d.detail.as_deref().unwrap_or(""));
        }
        out.push(d);
    }
    Ok(out)
}

/// A refused schedule (22023) keeps the database's message as it is.
fn bad_schedule(e: Error) -> Error {
    match e {
        Error::Permanent { sqlstate: Some(s), message } if s == "22023" => {
            let message = message.strip_suffix(" (SQLSTATE 22023)").map(String::from).unwrap_or(message);
            Error::Permanent { sqlstate: Some(s), message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fields_given() {
        let s = Schedule::new("nightly", "0 3 * * *", "report").zone("Europe/Berlin")
            .catch_up(CatchUp::All).max_attempts(3);
        assert_eq!(s.to_json(), json!({"name": "nightly", "expression": "0 3 * * *", "kind": "report",
                                       "zone": "Europe/Berlin", "catch_up": "all", "max_attempts": 3}));
        assert_eq!(s.name(), "nightly");
    }
}
