//! A lease whose database becomes unreachable is lost in time: its
//! connection goes through the project's cut proxy (tests/tools/cutproxy.c,
//! SKL_CUTPROXY), which then blackholes everything.  The renewals fail,
//! `lost()` fires while the lease row is still live — before anyone else
//! could take the lease — and the work under `with_lease` is dropped; once
//! the lease expired another holder takes it with the next token.

mod common;
use common::*;
use skiplock::{Error, Leases};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};
use tokio_postgres::config::{Config, Host};

/// The proxy, started on a free port in front of the URL under test.
struct Cut {
    ctl: std::path::PathBuf,
    url: String,
    _proc: Children,
}

fn cut() -> Cut {
    let bin = std::env::var("SKL_CUTPROXY").expect("SKL_CUTPROXY is not set: run under CTest");
    let cfg = Config::from_str(&url()).unwrap();
    let host = match &cfg.get_hosts()[0] {
        Host::Tcp(h) => h.clone(),
        other => panic!("a TCP host is needed, not {:?}", other),
    };
    let dir = std::env::temp_dir().join(format!("skl-rust-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ctl, port_file) = (dir.join("ctl.sock"), dir.join("port"));
    let child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0", "--upstream", &format!("{}:{}", host, cfg.get_ports()[0]),
               "--ttl", "120", "--control"]).arg(&ctl).arg("--port-file").arg(&port_file)
        .stderr(Stdio::null()).spawn().expect("cutproxy");
    let end = Instant::now() + Duration::from_secs(10);
    let port = loop {
        match std::fs::read_to_string(&port_file) {
            Ok(p) if !p.trim().is_empty() => break p.trim().to_string(),
            _ if Instant::now() > end => panic!("cutproxy did not start"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let url = format!("postgresql://{}@127.0.0.1:{}/{}", cfg.get_user().unwrap(), port,
                      cfg.get_dbname().unwrap());
    Cut { ctl, url, _proc: Children(vec![child]) }
}

impl Cut {
    fn ctl(&self, cmd: &[&str]) {
        let bin = std::env::var("SKL_CUTPROXY").unwrap();
        let st = Command::new(bin).arg("ctl").arg(&self.ctl).args(cmd).stdout(Stdio::null())
            .status().unwrap();
        assert!(st.success(), "cutproxy ctl {:?}", cmd);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_loses_the_lease_before_it_expires() {
    let check = connect(&direct_url()).await;
    let proxy = cut();
    let ttl = Duration::from_millis(2000);
    let live = "SELECT expires_at > clock_timestamp() FROM skiplock.leases WHERE name = 't.cut'";
    let t0 = Instant::now();
    let r = Leases::new(proxy.url.clone()).owner("t-cut").with_lease("t.cut", ttl, |_| async {
        tokio::time::sleep(ttl / 2).await; /* a renewal went through by then */
        proxy.ctl(&["mode", "blackhole"]);
        std::future::pending::<()>().await /* the work goes on until dropped */
    }).await;
    let lost_after = t0.elapsed();
    let still_live = one(&check, live).await;
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{:?}", r);
    assert_eq!(still_live, "t", "lost after {:?}, while the lease was still live", lost_after);
    assert!(lost_after < ttl + ttl / 3, "lost after {:?}", lost_after);
    let again = Leases::new(url()).owner("t-next");
    assert!(again.acquire("t.cut", ttl).await.unwrap().is_none(), "not free before it expires");
    assert!(wait_for(&check, live, "f", 3).await, "the lease expires by itself");
    let next = again.acquire("t.cut", ttl).await.unwrap().expect("free once expired");
    assert!(next.release().await.unwrap());
    proxy.ctl(&["mode", "pass"]);
}
