//! What the HTTP benchmarks share: the release `spendgate` binary on ephemeral ports,
//! and a throwaway PostgreSQL database when one answers at 127.0.0.1:5432.

#![allow(dead_code, reason = "each benchmark uses part of it")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A running server, killed on drop: (process, control URL, proxy URL).
pub struct Server {
    child: std::process::Child,
    pub control: String,
    pub proxy: String,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `spendgate serve` on `db_url` with `env` over the benchmark defaults (dev
/// mode, enterprise plan, no rate limits); `log_var` names the env var that sets
/// its log filter.
pub fn start(db_url: &str, env: &[(&str, &str)], log_var: &str) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spendgate"));
    cmd.arg("serve")
        .env("SPENDGATE_DATABASE_URL", db_url)
        .env("SPENDGATE_CONTROL_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_PROXY_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_DEV", "1")
        .env("SPENDGATE_DEFAULT_PLAN", "enterprise")
        .env("SPENDGATE_RATE_LIMIT_IP_PER_MINUTE", "0")
        .env("SPENDGATE_RATE_LIMIT_KEY_PER_MINUTE", "0")
        .env("SPENDGATE_LOG", std::env::var(log_var).unwrap_or_else(|_| "warn".to_owned()))
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn spendgate");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("ready line");
    let field = |name: &str| {
        line.split_whitespace().find_map(|p| p.strip_prefix(name)).map(str::to_owned).unwrap_or_default()
    };
    Server { control: field("control="), proxy: field("proxy="), child }
}

pub fn pg_available() -> bool {
    std::net::TcpStream::connect_timeout(&"127.0.0.1:5432".parse().expect("addr"), Duration::from_millis(300))
        .is_ok()
}

fn psql(sql: &str) -> bool {
    Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-qc", sql])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A fresh PostgreSQL database, dropped with this value.
pub struct PgDb(pub String);

impl PgDb {
    pub fn create(prefix: &str) -> Option<PgDb> {
        let name = format!("{prefix}_{}", std::process::id());
        (pg_available() && psql(&format!("CREATE DATABASE {name}"))).then(|| PgDb(name))
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.0)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        // `BENCH_KEEP_DB=1` keeps the database for a look at its plans afterwards.
        if std::env::var("BENCH_KEEP_DB").is_ok_and(|v| v == "1") {
            eprintln!("kept database {} (BENCH_KEEP_DB=1)", self.0);
            return;
        }
        psql(&format!("DROP DATABASE {} WITH (FORCE)", self.0));
    }
}
