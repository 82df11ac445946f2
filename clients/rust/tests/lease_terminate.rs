//! A lease survives its connection: the backend that served the renewals
//! is terminated (pg_terminate_backend) three times while the lease is
//! held; each costs a failed call and a reconnect, the renewals go on, the
//! token stays and the lease is never lost.  Its own test binary: it
//! terminates backends, which must not hit another test's connections.

mod common;
use common::*;
use skiplock::Leases;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_during_renewal_cost_nothing() {
    let check = connect(&direct_url()).await;
    let ttl = Duration::from_millis(1500);
    let held = Leases::new(url()).owner("t-term").acquire("t.term", ttl).await.unwrap()
        .expect("free");
    let renewed = "SELECT renewed_at FROM skiplock.leases WHERE name = 't.term'";
    let kill = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                WHERE datname = current_database() AND pid <> pg_backend_pid() \
                AND query LIKE '%skiplock.lease_%t.term%'";
    for round in 0..3 {
        let before = one(&check, renewed).await;
        assert_ne!(one(&check, kill).await, "0", "round {}: no backend served the lease", round);
        let again = format!("SELECT renewed_at > '{}' FROM skiplock.leases WHERE name = 't.term'",
                            before);
        assert!(wait_for(&check, &again, "t", 3).await, "round {}: no renewal after it", round);
    }
    tokio::time::sleep(ttl).await;
    assert!(!held.is_lost(), "{:?}", held.lost_reason());
    assert_eq!(one(&check, "SELECT owner || '/' || fencing || '/' || \
                            (expires_at > clock_timestamp()) FROM skiplock.leases \
                            WHERE name = 't.term'").await,
               format!("t-term/{}/true", held.fencing()));
    assert!(held.release().await.unwrap());
    assert_no_idle_in_transaction(&check).await;
}
