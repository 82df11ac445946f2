//! The crate's schema installer, skiplock::init and examples/init (the
//! command), on new empty databases, direct and pooled: three at once
//! install each step once; again, nothing is applied; a step installed
//! from another text is refused (SQLSTATE 55000, naming it).

mod common;
use common::*;
use skiplock::{init, Error, INSTALL_SQL};
use std::process::{Command, Output};

/// The steps the installer knows, as "version name", from its drift check.
fn installer_steps() -> Vec<String> {
    INSTALL_SQL.lines()
        .filter_map(|l| l.trim().strip_prefix('('))
        .filter_map(|l| {
            let mut f = l.split(", ");
            let (v, name) = (f.next()?.parse::<i32>().ok()?, f.next()?.trim_matches('\''));
            Some(format!("{} {}", v, name))
        })
        .collect()
}

/// Every row of skiplock.schema_version, with when it was applied.
async fn applied(c: &tokio_postgres::Client) -> String {
    one(c, "SELECT string_agg(version || ' ' || name || ' ' || applied_at, ',' ORDER BY version) \
            FROM skiplock.schema_version").await
}

async fn init_on(url: &str) -> Result<i32, Error> {
    init(&connect(url).await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_inits_at_once_install_each_step_once() {
    let steps = installer_steps();
    let newest: i32 = steps.last().and_then(|s| s.split(' ').next()?.parse().ok()).unwrap();
    assert!(steps.len() >= 20 && newest >= skiplock::MIN_SCHEMA, "{:?}", steps);
    let name = format!("rust_init_{}", std::process::id());
    let admin = scratch_db(&name).await;
    let target = with_db(&url(), &name);
    let (a, b, c) = tokio::join!(init_on(&target), init_on(&target), init_on(&target));
    for r in [a, b, c] {
        assert_eq!(r.unwrap(), newest);
    }
    let check = connect(&with_db(&direct_url(), &name)).await;
    assert_eq!(one(&check, "SELECT string_agg(version || ' ' || name, ',' ORDER BY version) \
                            FROM skiplock.schema_version").await, steps.join(","),
               "one row per step");
    let before = applied(&check).await;
    assert_eq!(init_on(&target).await.unwrap(), newest);
    assert_eq!(applied(&check).await, before, "nothing applied again");

    one(&check, "UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 24").await;
    let e = init_on(&target).await.unwrap_err();
    assert!(matches!(e, Error::Permanent { .. }) && e.sqlstate() == Some("55000"), "{:?}", e);
    assert!(e.to_string().starts_with("schema step 0024_cron is installed from a text this \
                                       installer does not know"), "{}", e);
    assert_eq!(applied(&check).await, before, "nothing written");
    drop(check);
    admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", name)).await.unwrap();
}

/// examples/init with `args`, DATABASE_URL set to `env` or unset.
fn command(args: &[&str], env: Option<&str>) -> Output {
    let mut c = Command::new(example("init"));
    c.args(args).env_remove("DATABASE_URL");
    if let Some(u) = env {
        c.env("DATABASE_URL", u);
    }
    c.output().expect("examples/init")
}

/// Exit status `code` and one line on stderr that starts with `start`.
fn fails(o: &Output, code: i32, start: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{}", err);
    assert!(err.starts_with(start) && err.lines().count() == 1, "{:?}", err);
    assert!(o.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_init_command() {
    let help = command(&["--help"], None);
    assert!(help.status.success() && help.stdout.starts_with(b"usage: init [--url URL]"));
    fails(&command(&[], None), 2, "init: no database URL: give --url URL or set DATABASE_URL");
    fails(&command(&["--uri", "x"], None), 2, "init: unknown argument \"--uri\" (see --help)");
    fails(&command(&["--url"], None), 2, "init: --url needs a value");
    fails(&command(&["--url", "postgresql://u@h:99999/db"], None), 2, "init: invalid database URL");
    fails(&command(&["--url", "postgresql://u@127.0.0.1:1/db"], None), 1, "init: transient: ");

    let name = format!("rust_init_cmd_{}", std::process::id());
    let admin = scratch_db(&name).await;
    let target = with_db(&url(), &name);
    let want = format!("skiplock schema at step {}\n", init_on(&url()).await.unwrap());
    for o in [command(&[], Some(&target)), command(&["--url", &target], Some("postgresql://bad"))] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    }
    let check = connect(&with_db(&direct_url(), &name)).await;
    one(&check, "UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 7").await;
    fails(&command(&["--url", &target], None), 1, "init: schema step 0007_retry is installed from a \
                                                   text this installer does not know");
    drop(check);
    admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", name)).await.unwrap();
}
