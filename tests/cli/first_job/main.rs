//! A first job: the schema installed by the crate, a job enqueued in the
//! app's transaction and completed by a worker.  `first-job init` only
//! installs the schema, `first-job job` only runs the job.
use serde_json::json;
use skiplock::{enqueue, EnqueueOptions, Worker};
use std::{sync::Arc, time::Duration};
use tokio::sync::Notify;
use tokio_postgres::NoTls;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let url = std::env::var("DATABASE_URL")?;
    let (mut client, conn) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(conn);
    if mode != "job" {
        println!("schema at step {}", skiplock::init(&client).await?);
    }
    if mode == "init" {
        return Ok(());
    }

    let tx = client.transaction().await?;
    let id = enqueue(&tx, "greet", &json!({ "name": "a new user" }), &EnqueueOptions::default())
        .await?;
    tx.commit().await?;

    let handled = Arc::new(Notify::new());
    let signal = handled.clone();
    let worker = Worker::builder(url)
        .concurrency(1)
        .poll_interval(Duration::from_millis(100))
        .handler("greet", move |job, _cancel| {
            let signal = signal.clone();
            async move {
                signal.notify_one();
                Ok(json!({ "greeted": job.payload["name"] }))
            }
        })
        .build()?
        .start()
        .await?;
    tokio::time::timeout(Duration::from_secs(30), handled.notified()).await?;
    worker.shutdown().await?;
    println!("job {} handled", id);
    Ok(())
}
