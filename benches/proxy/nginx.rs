//! The floor: a plain nginx reverse proxy in front of the same mock, started by the
//! bench with a generated configuration in a temporary directory on an ephemeral port
//! (two worker processes, as spendgate has two workers; keep-alive to the mock; no
//! buffering, so that a stream's chunks pass as they come), and stopped on drop.
//! Whatever it adds over the mock is what any extra hop costs on this machine.
//!
//! The binary: `PROXY_BENCH_NGINX`, else `/usr/sbin/nginx`, else `nginx` on the PATH.
//! Without one the bench says so and how to install it (`apt-get install -y
//! nginx-light`), and reports no floor.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::BoxError;

/// How to install the floor, printed when it is missing.
pub const INSTALL: &str = "floor: not measured (install nginx-light: apt-get install -y nginx-light)";

/// A running nginx; stopped (and its directory removed) on drop.
pub struct Nginx {
    pub base: String,
    child: Child,
    binary: PathBuf,
    conf: PathBuf,
    prefix: tempfile::TempDir,
}

/// The nginx binary to run, if there is one.
pub fn binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PROXY_BENCH_NGINX") {
        return Some(PathBuf::from(path));
    }
    let fixed = PathBuf::from("/usr/sbin/nginx");
    if fixed.exists() {
        return Some(fixed);
    }
    let found = Command::new("nginx").arg("-v").stderr(Stdio::null()).status().is_ok();
    found.then(|| PathBuf::from("nginx"))
}

fn config(dir: &std::path::Path, port: u16, upstream: &str) -> String {
    let d = dir.display();
    let upstream = upstream.trim_start_matches("http://");
    format!(
        r#"worker_processes 2;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    tcp_nodelay on;
    upstream mock {{
        server {upstream};
        keepalive 256;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"#
    )
}

/// A port nobody listens on right now.
fn free_port() -> Result<u16, BoxError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Nginx {
    /// Starts nginx in front of `upstream` (`http://127.0.0.1:port`) and waits until it
    /// accepts connections.
    pub fn start(binary: PathBuf, upstream: &str) -> Result<Nginx, BoxError> {
        let prefix = tempfile::tempdir()?;
        let port = free_port()?;
        let conf = prefix.path().join("nginx.conf");
        std::fs::write(&conf, config(prefix.path(), port, upstream))?;
        let child = Command::new(&binary)
            .arg("-p")
            .arg(prefix.path())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", binary.display()))?;
        let nginx = Nginx { base: format!("http://127.0.0.1:{port}"), child, binary, conf, prefix };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(nginx.prefix.path().join("error.log")).unwrap_or_default();
                return Err(format!("nginx did not listen on {port} within 10 s: {log}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `-s stop` signals the master, which stops its workers; kill it if that fails.
        let stopped = Command::new(&self.binary)
            .arg("-p")
            .arg(self.prefix.path())
            .arg("-c")
            .arg(&self.conf)
            .args(["-s", "stop"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
