//! Is a connection direct?  The same rule as the C worker (core/url.c,
//! worker/worker_idle.c): a URL is pooled when a host's first label ends in
//! `-pooler` (Neon), a host is a Supabase pooler, or the port is 6432 or
//! 6543; an explicit [`Pooler`] setting overrides the guess.  Otherwise the
//! connection counts as direct only when the server reports the port that
//! was dialled (`inet_server_port()`, NULL on a Unix socket): PgBouncer on an
//! unusual port, or a port mapping, then makes the worker poll, which is
//! always safe.  LISTEN is sent only on a connection known to be direct.

use crate::conn::select;
use crate::error::Error;
use std::str::FromStr;
use tokio_postgres::config::{Config, Host};
use tokio_postgres::Client;

/// What sits between the worker and PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooler {
    /// Guess from the URL, then ask the server (the default).
    Auto,
    /// A direct connection: LISTEN on it.
    None,
    /// A pooler (transaction or session mode): never LISTEN on it.
    Pooled,
}

fn label_is_pooler(host: &str) -> bool {
    let first = host.split('.').next().unwrap_or("");
    first.len() > 7 && first.ends_with("-pooler")
}

/// True when the URL names a pooler by the rule above.
pub fn url_looks_pooled(url: &str) -> bool {
    let cfg = match Config::from_str(url) {
        Ok(c) => c,
        Err(_) => return false,
    };
    let host_pooled = cfg.get_hosts().iter().any(|h| match h {
        Host::Tcp(h) => label_is_pooler(h) || h.ends_with(".pooler.supabase.com"),
        _ => false,
    });
    host_pooled || cfg.get_ports().iter().any(|p| *p == 6432 || *p == 6543)
}

/// The one port the URL dials (5432 when it names none), if only one.
fn dialled_port(url: &str) -> Option<u16> {
    let cfg = Config::from_str(url).ok()?;
    let ports = cfg.get_ports();
    match ports.first() {
        None => Some(5432),
        Some(p) if ports.iter().all(|q| q == p) => Some(*p),
        _ => None,
    }
}

/// Decides whether `client`, opened on `url`, may LISTEN.
pub(crate) async fn is_direct(client: &Client, url: &str, mode: Pooler) -> Result<bool, Error> {
    match mode {
        Pooler::None => return Ok(true),
        Pooler::Pooled => return Ok(false),
        Pooler::Auto if url_looks_pooled(url) => return Ok(false),
        Pooler::Auto => {}
    }
    let rows = select(client, "SELECT inet_server_port()").await?;
    let port = rows.first().and_then(|r| r.get(0));
    Ok(match port {
        None => true,
        Some(p) => dialled_port(url).map_or(false, |d| p == d.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::url_looks_pooled;

    #[test]
    fn the_c_rule() {
        assert!(url_looks_pooled("postgresql://u@ep-cool-1-pooler.eu.aws.neon.tech/db"));
        assert!(url_looks_pooled("postgresql://u@db.example.com:6432/db"));
        assert!(url_looks_pooled("postgresql://u@db.example.com:6543/db"));
        assert!(url_looks_pooled("postgresql://u@aws-0-eu.pooler.supabase.com/db"));
        assert!(!url_looks_pooled("postgresql://u@ep-cool-1.eu.aws.neon.tech/db"));
        assert!(!url_looks_pooled("postgresql://u@pooler.example.com:5432/db"));
        assert!(!url_looks_pooled("postgresql://u@-pooler.x/db"));
    }
}
