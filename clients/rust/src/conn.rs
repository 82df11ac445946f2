//! Connections: how they are opened (with or without TLS), the task that
//! drives each one and turns its notifications into wake-ups, and the one
//! way statements are sent (a simple query, see sql.rs).

use crate::error::Error;
use futures_util::{future::BoxFuture, stream, FutureExt, StreamExt};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage, SimpleQueryRow, Socket};

type ConnectFn = dyn Fn(String, Arc<Notify>) -> BoxFuture<'static, Result<Client, Error>> + Send + Sync;

/// How the worker opens its connections: [`Connector::no_tls`] (the
/// default) or [`Connector::tls`] with any tokio-postgres TLS connector
/// (postgres-native-tls, tokio-postgres-rustls), which Neon and most
/// hosted databases require.
#[derive(Clone)]
pub struct Connector(Arc<ConnectFn>);

impl Connector {
    pub fn no_tls() -> Connector {
        Connector::tls(NoTls)
    }

    pub fn tls<T>(tls: T) -> Connector
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        Connector(Arc::new(move |url: String, wake: Arc<Notify>| {
            let tls = tls.clone();
            async move {
                let (client, conn) = tokio_postgres::connect(&url, tls).await?;
                tokio::spawn(drive(conn, wake));
                Ok(client)
            }
            .boxed()
        }))
    }

    /// Opens a connection; its notifications (LISTEN) wake `wake`.
    pub(crate) async fn connect(&self, url: &str, wake: Arc<Notify>) -> Result<Client, Error> {
        (self.0)(url.to_string(), wake).await
    }
}

impl Default for Connector {
    fn default() -> Connector {
        Connector::no_tls()
    }
}

/// Runs a connection until it closes, waking `wake` on every notification.
async fn drive<S, T>(mut conn: tokio_postgres::Connection<S, T>, wake: Arc<Notify>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut messages = stream::poll_fn(move |cx| conn.poll_message(cx));
    while let Some(m) = messages.next().await {
        match m {
            Ok(AsyncMessage::Notification(_)) => wake.notify_one(),
            Ok(AsyncMessage::Notice(n)) => log::debug!("server notice: {}", n.message()),
            Ok(_) => {}
            Err(e) => {
                log::info!("connection closed: {}", e);
                break;
            }
        }
    }
}

/// Sends one statement as a simple query and returns its rows (text).
pub(crate) async fn select(c: &Client, sql: &str) -> Result<Vec<SimpleQueryRow>, Error> {
    let msgs = c.simple_query(sql).await?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect())
}
