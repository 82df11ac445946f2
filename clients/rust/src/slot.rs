//! One connection shared by the lease calls of a [`crate::Leases`]: opened
//! on first use, dropped after a failed or late call and reopened by the
//! next one.  Every call is one simple query in autocommit (sql.rs), so the
//! connection holds no state between calls and may be pooled, cut or
//! replaced at any time.

use crate::conn::{select, Connector};
use crate::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tokio_postgres::{Client, SimpleQueryRow};

pub(crate) struct Slot {
    url: String,
    connector: Connector,
    client: Mutex<Option<Arc<Client>>>,
}

impl Slot {
    pub fn new(url: String, connector: Connector) -> Slot {
        Slot { url, connector, client: Mutex::new(None) }
    }

    /// The open connection, or a new one.
    async fn get(&self) -> Result<Arc<Client>, Error> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        // Lease calls hear no notifications: nothing waits on this.
        let c = Arc::new(self.connector.connect(&self.url, Arc::new(Notify::new())).await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Forgets `c` after a failure, so the next call reconnects.
    async fn forget(&self, c: Option<&Arc<Client>>) {
        let mut slot = self.client.lock().await;
        if c.map_or(true, |c| slot.as_ref().map_or(false, |s| Arc::ptr_eq(s, c))) {
            *slot = None;
        }
    }

    /// Runs `sql`, connecting first when needed, all within `within`.  A
    /// transient failure or no answer in time drops the connection.
    pub async fn call(&self, sql: &str, within: Duration) -> Result<Vec<SimpleQueryRow>, Error> {
        let mut used = None;
        let r = tokio::time::timeout(within, async {
            let c = self.get().await?;
            used = Some(c.clone());
            select(&c, sql).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(Error::Transient { sqlstate: None,
                                   message: format!("no answer within {:?}", within) })
        });
        if matches!(&r, Err(e) if e.is_transient()) {
            self.forget(used.as_ref()).await;
        }
        r
    }
}
