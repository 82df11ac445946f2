//! examples/cron.rs, as docs/clients/rust.md shows it: two replicas
//! started at once declare the same schedule (`@every 1s` here) and run for
//! five seconds; each fire time was enqueued once and its job run once, by
//! one of them.

mod common;
use common::*;
use std::process::{Command, Stdio};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_of_the_example_fire_each_time_once() {
    let check = connect(&direct_url()).await;
    let name = "t.cron.example";
    let replica = || Command::new(example("cron"))
        .args(["--url", &url(), "--name", name, "--expression", "@every 1s", "--zone", "UTC",
               "--run-ms", "5000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("examples/cron");
    let replicas = vec![replica(), replica()];
    let outputs = tokio::task::spawn_blocking(move || {
        replicas.into_iter().map(|c| c.wait_with_output().expect("the replica")).collect::<Vec<_>>()
    }).await.unwrap();
    let mut ran = 0;
    for o in &outputs {
        assert!(o.status.success(), "{:?}", o.status);
        let out = String::from_utf8_lossy(&o.stdout);
        ran += out.lines().filter(|l| l.starts_with("ran ") && l.ends_with("fired_for \"t.cron.example\""))
            .count() as i64;
    }
    one(&check, &format!("DELETE FROM skiplock.schedules WHERE name = '{}'", name)).await;
    let f = cron_fires(&check, name).await;
    assert!(f.jobs >= 3, "{} fire times in 5 s", f.jobs);
    assert_eq!((f.times, f.span), (f.jobs, f.jobs), "one job per fire time, none skipped");
    assert_eq!(ran, f.completed, "each completed job ran once");
    assert!(f.completed >= f.jobs - 2, "{} of {} completed", f.completed, f.jobs);
}
