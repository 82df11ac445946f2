//! `run_singleton` across processes, with the example that the docs show
//! (examples/singleton.rs): three replicas, one writes fenced rows; the
//! holder is SIGKILLed twice and each time another replica takes over
//! within about the ttl — not before the dead holder's lease expired —
//! and at no time did two replicas write.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

const TTL_MS: u64 = 2000;

fn replica() -> std::process::Child {
    Command::new(example("singleton"))
        .args(["--url", &url(), "--name", "t.single", "--ttl-ms", &TTL_MS.to_string(),
               "--every-ms", "50"])
        .stdout(Stdio::null())
        .spawn()
        .expect("examples/singleton")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_runs_and_another_takes_over_a_killed_one() {
    let check = connect(&direct_url()).await;
    one(&check, "CREATE TABLE IF NOT EXISTS lease_ticks (at timestamptz NOT NULL DEFAULT \
                 clock_timestamp(), name text NOT NULL, fencing bigint NOT NULL, \
                 pid int NOT NULL)").await;
    let mut replicas = Children((0..3).map(|_| replica()).collect());
    let ticks = "SELECT count(*) > 0 FROM lease_ticks WHERE name = 't.single'";
    assert!(wait_for(&check, ticks, "t", 20).await, "no replica took the lease");
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(1000)).await; /* renewed meanwhile */
        let holder: u32 = one(&check, "SELECT pid FROM lease_ticks WHERE name = 't.single' \
                                       ORDER BY at DESC LIMIT 1").await.parse().unwrap();
        replicas.kill(holder);
        let killed_at = one(&check, "SELECT clock_timestamp()").await;
        let after = format!("SELECT count(*) > 0 FROM lease_ticks WHERE name = 't.single' \
                             AND at > '{}' AND pid <> {}", killed_at, holder);
        assert!(wait_for(&check, &after, "t", 10).await, "round {}: no takeover", round);
        let took: f64 = one(&check, &format!(
            "SELECT extract(epoch FROM min(at) - '{}') FROM lease_ticks \
             WHERE name = 't.single' AND at > '{}'", killed_at, killed_at)).await.parse().unwrap();
        let ttl = TTL_MS as f64 / 1000.0;
        assert!(took >= ttl * 2.0 / 3.0 - 0.1, "round {}: taken after {}s, while live", round, took);
        assert!(took <= ttl + 1.5, "round {}: taken over after {}s (ttl {}s)", round, took, ttl);
    }
    drop(replicas);
    assert_eq!(one(&check, "SELECT count(*) FROM (SELECT fencing < lag(fencing) OVER (ORDER BY at) \
                            AS older FROM lease_ticks WHERE name = 't.single') x \
                            WHERE older").await, "0", "an older token wrote after a newer one");
    assert_eq!(one(&check, "SELECT count(*) FROM (SELECT fencing FROM lease_ticks \
                            WHERE name = 't.single' GROUP BY fencing \
                            HAVING count(DISTINCT pid) > 1) x").await, "0", "a token, one pid");
    assert_eq!(one(&check, "SELECT count(DISTINCT pid) || '/' || count(DISTINCT fencing) \
                            FROM lease_ticks WHERE name = 't.single'").await, "3/3");
}
