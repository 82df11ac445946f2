//! Leases against the real database, directly and through PgBouncer in
//! transaction mode: one holder at a time, renewals past the ttl, release,
//! fenced writes refused to a stale holder, loss cancelling the work, and
//! bad input refused before anything is written.

mod common;
use common::*;
use skiplock::{Error, Leases};
use std::time::{Duration, Instant};

fn leases(owner: &str) -> Leases {
    Leases::new(url()).owner(owner)
}

async fn create_table(check: &tokio_postgres::Client, t: &str) {
    one(check, &format!("CREATE TABLE IF NOT EXISTS public.{} (fencing bigint NOT NULL)", t)).await;
}

/// The lease row: "owner/fencing/live".
async fn row(check: &tokio_postgres::Client, name: &str) -> String {
    one(check, &format!("SELECT owner || '/' || fencing || '/' || (expires_at > clock_timestamp()) \
                         FROM skiplock.leases WHERE name = '{}'", name)).await
}

/// Ends the lease now, as an operator (or its expiry) would.
async fn expire(check: &tokio_postgres::Client, name: &str) {
    one(check, &format!("UPDATE skiplock.leases SET expires_at = clock_timestamp() \
                         WHERE name = '{}' RETURNING 1", name)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_renewed_past_its_ttl_then_released() {
    let check = connect(&direct_url()).await;
    let (a, b) = (leases("t-a"), leases("t-b"));
    let ttl = Duration::from_millis(900);
    let held = a.acquire("t.one", ttl).await.unwrap().expect("free");
    let token = held.fencing();
    assert!(b.acquire("t.one", ttl).await.unwrap().is_none(), "held by a");
    assert!(a.acquire("t.one", ttl).await.unwrap().is_none(), "held, by its owner too");
    tokio::time::sleep(ttl * 2).await; /* renewed every ttl/3 meanwhile */
    assert!(!held.is_lost(), "{:?}", held.lost_reason());
    assert!(b.acquire("t.one", ttl).await.unwrap().is_none(), "still held after 2 ttl");
    assert_eq!(row(&check, "t.one").await, format!("t-a/{}/true", token));
    assert!(held.release().await.unwrap(), "released");
    assert_eq!(row(&check, "t.one").await, format!("t-a/{}/false", token), "not live");
    let next = b.acquire("t.one", ttl).await.unwrap().expect("free at once after release");
    assert_eq!(next.fencing(), token + 1);
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_fenced_out_and_told() {
    let check = connect(&direct_url()).await;
    create_table(&check, "t_fenced").await;
    let ttl = Duration::from_millis(1500);
    let old = leases("t-old").acquire("t.fence", ttl).await.unwrap().expect("free");
    expire(&check, "t.fence").await; /* the old holder was paused past its lease */
    let new = leases("t-new").acquire("t.fence", ttl).await.unwrap().expect("expired");
    assert_eq!(new.fencing(), old.fencing() + 1);
    let mut c = connect(&url()).await;
    for (holder, want_ok) in [(&old, false), (&new, true)] {
        let tx = c.transaction().await.unwrap();
        let r = holder.fence(&tx).await;
        if want_ok {
            r.expect("the current token passes");
            tx.batch_execute(&format!("INSERT INTO public.t_fenced VALUES ({})", holder.fencing()))
                .await.unwrap();
            tx.commit().await.unwrap();
        } else {
            match r {
                Err(Error::LeaseLost { ref name, fencing }) => {
                    assert_eq!((name.as_str(), fencing), ("t.fence", old.fencing()))
                }
                other => panic!("a stale token passed: {:?}", other),
            }
            assert_eq!(r.unwrap_err().sqlstate(), Some("SK001"));
        }
    }
    assert_eq!(one(&check, "SELECT string_agg(fencing::text, ',') FROM public.t_fenced").await,
               new.fencing().to_string(), "only the current holder wrote");
    let t0 = Instant::now();
    tokio::time::timeout(ttl, old.lost()).await.expect("the old holder's renewal found it lost");
    assert!(t0.elapsed() <= ttl / 3 + Duration::from_millis(300), "{:?}", t0.elapsed());
    assert!(old.lost_reason().unwrap().contains("matched no row"), "{:?}", old.lost_reason());
    assert!(!old.release().await.unwrap(), "nothing to release: it is the new holder's");
    assert!(!new.is_lost());
    assert!(new.release().await.unwrap());
    assert_no_idle_in_transaction(&check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_runs_once_and_cancels_the_work_it_lost() {
    let check = connect(&direct_url()).await;
    let (a, b) = (leases("t-wa"), leases("t-wb"));
    let ttl = Duration::from_millis(1200);
    let v = a.with_lease("t.with", ttl, |l| async move { l.fencing() }).await.unwrap();
    let token = v.expect("ran");
    let other = b.acquire("t.with", ttl).await.unwrap().expect("released when the work ended");
    assert_eq!(other.fencing(), token + 1);
    assert_eq!(a.with_lease("t.with", ttl, |_| async { 1 }).await.unwrap(), None, "held");
    other.release().await.unwrap();

    let (ticks, t) = (std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0)), Instant::now());
    let n = ticks.clone();
    let work = a.with_lease("t.with", ttl, move |_| async move {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let thief = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        expire(&check, "t.with").await;
        b.acquire("t.with", ttl).await.unwrap().expect("taken over")
    };
    let (r, taken) = tokio::join!(work, thief);
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{:?}", r.map(|_| ()));
    assert!(t.elapsed() < Duration::from_millis(200) + ttl / 3 + Duration::from_millis(400),
            "lost after {:?}", t.elapsed());
    let at_loss = ticks.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ticks.load(std::sync::atomic::Ordering::SeqCst), at_loss, "the work was dropped");
    assert!(taken.release().await.unwrap(), "the loser released nothing of the new holder's");
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_written() {
    let check = connect(&direct_url()).await;
    let l = leases("t-bad");
    let long = "t.bad.".to_string() + &"x".repeat(251);
    let day = Duration::from_secs(86400);
    let cases: Vec<(&str, Duration)> = vec![
        ("", Duration::from_secs(1)),
        (&long, Duration::from_secs(1)),
        ("t.bad\0nul", Duration::from_secs(1)),
        ("t.bad.zero", Duration::ZERO),
        ("t.bad.short", Duration::from_millis(99)),
        ("t.bad.long", day * 366),
    ];
    for (name, ttl) in cases {
        match l.acquire(name, ttl).await {
            Err(Error::Invalid(m)) => assert!(m.contains("lease") || m.contains("NUL"), "{}", m),
            other => panic!("{:?} {:?}: {:?}", name, ttl, other.map(|g| g.map(|g| g.fencing()))),
        }
    }
    let g = l.acquire(&long[..256], Duration::from_secs(1)).await.unwrap().expect("256 fits");
    g.release().await.unwrap();
    match leases("").acquire("t.bad.owner", Duration::from_secs(1)).await {
        Err(Error::Invalid(m)) => assert!(m.contains("owner"), "{}", m),
        other => panic!("empty owner: {:?}", other.is_ok()),
    }
    assert_eq!(one(&check, "SELECT count(*) FROM skiplock.leases WHERE name LIKE 't.bad%' \
                            AND length(name) <> 256").await, "0", "nothing written");
}
