//! Installs or upgrades skiplock's schema with the crate's own installer
//! (`skiplock::init`), no C binary needed:
//!
//!   cargo run --example init -- --url postgresql://owner@db/app
//!
//! The URL may also come from `DATABASE_URL`.  Prints the installed step on
//! success; a failure is one line on stderr and exit status 1, bad usage
//! exit status 2.

use std::process::ExitCode;
use tokio_postgres::{Config, NoTls};

const USAGE: &str = "usage: init [--url URL]\n\
                     Installs or upgrades the skiplock schema in the database at URL\n\
                     (default: $DATABASE_URL); safe to run again, and beside other installers.";

/// The database's settings from the arguments or the environment; None:
/// --help; Err: bad usage.
fn config() -> Result<Option<Config>, String> {
    let mut url = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--url" => url = Some(it.next().ok_or("--url needs a value")?),
            _ => match arg.strip_prefix("--url=") {
                Some(u) => url = Some(u.to_string()),
                None => return Err(format!("unknown argument \"{}\" (see --help)", arg)),
            },
        }
    }
    let url = url.ok_or("no database URL: give --url URL or set DATABASE_URL")?;
    url.parse().map(Some).map_err(|e| format!("invalid database URL: {}", e))
}

async fn install(config: &Config) -> Result<i32, skiplock::Error> {
    let (client, conn) = config.connect(NoTls).await?;
    tokio::spawn(conn);
    skiplock::init(&client).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let config = match config() {
        Ok(Some(c)) => c,
        Ok(None) => {
            println!("{}", USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("init: {}", e);
            return ExitCode::from(2);
        }
    };
    match install(&config).await {
        Ok(version) => {
            println!("skiplock schema at step {}", version);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("init: {}", e.to_string().replace('\n', " "));
            ExitCode::from(1)
        }
    }
}
