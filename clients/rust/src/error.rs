//! Typed errors.  A database error is transient or permanent by its
//! SQLSTATE, with the same table as the C library (src/lib/core/error.c):
//! class 08 and 57P01-57P03, 40001, 40P01, 55P03, 53300 are transient (retry
//! the call after a short backoff); every other SQLSTATE is permanent.  An
//! error without a SQLSTATE (a closed socket, a connection refused) is
//! transient.

use std::fmt;

/// The SQLSTATEs that are transient besides class 08.
const TRANSIENT_STATES: [&str; 7] = ["57P01", "57P02", "57P03", "40001", "40P01", "55P03", "53300"];

/// True when an error with this SQLSTATE is worth retrying.
pub fn sqlstate_is_transient(sqlstate: &str) -> bool {
    sqlstate.is_empty() || sqlstate.starts_with("08") || TRANSIENT_STATES.contains(&sqlstate)
}

/// An error of the skiplock client.
#[derive(Debug)]
pub enum Error {
    /// The job's claim is no longer current (its lease was lost or the job
    /// moved on): the outcome was refused, or `job_fence` raised SK001.
    Fenced { id: i64, fencing: i64 },
    /// Worth retrying after a short backoff: a lost connection, a
    /// serialization failure, a deadlock, a lock timeout, too many clients.
    Transient { sqlstate: Option<String>, message: String },
    /// Retrying will not help: a bad argument, a missing schema, a privilege.
    Permanent { sqlstate: Option<String>, message: String },
    /// The caller's input was refused before anything was sent.
    Invalid(String),
    /// The lease is no longer this holder's (SQLSTATE SK001 from
    /// `skiplock.lease_fence`, a renewal that matched no row, or no renewal
    /// in time): roll back, stop the work.
    LeaseLost { name: String, fencing: i64 },
    /// The idempotency key is not in progress under this holder (SQLSTATE
    /// SK002): released, expired or taken over after its recovery window.
    /// Whatever the transaction wrote was rolled back; claim again to learn
    /// the outcome.
    IdemNotHeld { key: String },
}

impl Error {
    /// True for [`Error::Transient`].
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transient { .. })
    }

    /// The SQLSTATE of a database error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Transient { sqlstate, .. } | Error::Permanent { sqlstate, .. } => {
                sqlstate.as_deref()
            }
            Error::Fenced { .. } | Error::LeaseLost { .. } => Some("SK001"),
            Error::IdemNotHeld { .. } => Some("SK002"),
            Error::Invalid(_) => None,
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        Error::Invalid(msg.into())
    }

    pub(crate) fn protocol(msg: impl Into<String>) -> Error {
        Error::Permanent { sqlstate: None, message: msg.into() }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        match e.as_db_error() {
            Some(db) => {
                let code = db.code().code().to_string();
                let message = format!("{} (SQLSTATE {})", db.message(), code);
                if sqlstate_is_transient(&code) {
                    Error::Transient { sqlstate: Some(code), message }
                } else {
                    Error::Permanent { sqlstate: Some(code), message }
                }
            }
            None => Error::Transient { sqlstate: None, message: e.to_string() },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Fenced { id, fencing } => {
                write!(f, "job {} is no longer claimed under fencing token {}", id, fencing)
            }
            Error::Transient { message, .. } => write!(f, "transient: {}", message),
            Error::Permanent { message, .. } => write!(f, "{}", message),
            Error::Invalid(m) => write!(f, "invalid input: {}", m),
            Error::LeaseLost { name, fencing } => {
                write!(f, "lease \"{}\" is no longer held under fencing token {}", name, fencing)
            }
            Error::IdemNotHeld { key } => {
                write!(f, "idempotency key \"{}\" is not in progress under this holder", key)
            }
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::sqlstate_is_transient;

    #[test]
    fn the_c_library_table() {
        for s in ["08006", "08000", "57P01", "57P02", "57P03", "40001", "40P01", "55P03", "53300"] {
            assert!(sqlstate_is_transient(s), "{}", s);
        }
        for s in ["23505", "42501", "22023", "SK001", "42P01", "57014", "53200"] {
            assert!(!sqlstate_is_transient(s), "{}", s);
        }
    }
}
