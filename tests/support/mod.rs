//! Test support: `TestApp` starts the real `spendgate` binary on ephemeral ports
//! against a fresh database (a new SQLite file, or a new PostgreSQL database when
//! `SPENDGATE_TEST_BACKEND=postgres`), and offers HTTP helpers.

#![allow(dead_code)]

pub mod browser;
pub mod connect_proxy;
pub mod mock;
pub mod otlp;
pub mod processor;
pub mod python;
pub mod receiver;
pub mod tls;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

pub const PASSWORD: &str = "correct-horse-battery";

/// Which database the suite runs against.
pub fn backend_is_postgres() -> bool {
    std::env::var("SPENDGATE_TEST_BACKEND").is_ok_and(|v| v == "postgres")
}

fn pg_admin_url() -> String {
    std::env::var("SPENDGATE_TEST_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// A fresh, empty database and its URL; dropped with the guard.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg_name: Option<String>,
}

impl TestDb {
    pub async fn new() -> TestDb {
        if backend_is_postgres() {
            let name = format!("sg_test_{}", uuid::Uuid::new_v4().simple());
            let mut conn = AsyncPgConnection::establish(&format!("{}/postgres", pg_admin_url()))
                .await
                .expect("connect to PostgreSQL (is it running on 127.0.0.1:5432?)");
            diesel::sql_query(format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .expect("create database");
            TestDb { url: format!("{}/{name}", pg_admin_url()), _dir: None, pg_name: Some(name) }
        } else {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("spendgate.db");
            TestDb { url: format!("sqlite://{}", path.display()), _dir: Some(dir), pg_name: None }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = self.pg_name.take() {
            let admin = format!("{}/postgres", pg_admin_url());
            // Drop runs outside any runtime guarantee: use a private one on a thread.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                rt.block_on(async {
                    let mut conn = AsyncPgConnection::establish(&admin).await.ok()?;
                    diesel::sql_query(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await
                        .ok()
                })
            })
            .join();
        }
    }
}

/// One running server process.
pub struct Server {
    pub child: Child,
    pub control: String,
    pub proxy: String,
    pub stderr_path: PathBuf,
}

impl Server {
    /// Starts `spendgate serve` and waits for its ready line.
    pub fn start(db_url: &str, extra_env: &[(&str, String)]) -> Server {
        let log_dir = std::env::temp_dir().join("spendgate-test-logs");
        let _ = std::fs::create_dir_all(&log_dir);
        let stderr_path = log_dir.join(format!("{}.log", uuid::Uuid::new_v4().simple()));
        let stderr = std::fs::File::create(&stderr_path).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spendgate"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SPENDGATE_DATABASE_URL", db_url)
            .env("SPENDGATE_CONTROL_ADDR", "127.0.0.1:0")
            .env("SPENDGATE_PROXY_ADDR", "127.0.0.1:0")
            .env("SPENDGATE_DEV", "1")
            .env("SPENDGATE_WORKERS", "2")
            .env("SPENDGATE_ARBITERS", "2")
            .env("SPENDGATE_DB_MAX_CONNECTIONS", "4")
            .env("SPENDGATE_INTERNAL_SECRET", "internal-test-secret")
            .env("SPENDGATE_CRON_SECRET", "cron-test-secret")
            .env("SPENDGATE_LOG", "warn,spendgate=info")
            // The suite tests the Free tier's limits; a test that wants the
            // self-hosted default passes SPENDGATE_DEFAULT_PLAN="" in extra_env.
            .env("SPENDGATE_DEFAULT_PLAN", "free")
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn spendgate");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("spendgate ready") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "server did not become ready: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        };
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|p| p.strip_prefix(&format!("{name}=")))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        Server { control: field("control"), proxy: field("proxy"), child, stderr_path }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

/// A server on a fresh database plus HTTP helpers.
pub struct TestApp {
    pub server: Server,
    pub db: TestDb,
    pub extra_env: Vec<(&'static str, String)>,
}

/// An HTTP client with its own cookie jar (one signed-in dashboard user).
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
}

pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Resp {
    /// The paths of a validation error's issues (asserts it is one).
    pub fn issue_paths(&self) -> Vec<Value> {
        assert_eq!(self.status, 400, "{self:?}");
        assert_eq!(self.code(), "validation_error", "{self:?}");
        self.body["error"]["details"]["issues"]
            .as_array()
            .expect("issues")
            .iter()
            .map(|i| i["path"].clone())
            .collect()
    }
}

impl std::fmt::Debug for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.text)
    }
}

pub async fn read(resp: reqwest::Response) -> Resp {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, headers, body, text }
}

impl Client {
    pub fn new(base: &str) -> Client {
        let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
        Client { http, base: base.to_owned() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, path: &str) -> Resp {
        read(self.http.get(self.url(path)).send().await.expect("request")).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        read(self.http.delete(self.url(path)).send().await.expect("request")).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        read(self.http.post(self.url(path)).json(&body).send().await.expect("request")).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        read(self.http.patch(self.url(path)).json(&body).send().await.expect("request")).await
    }

    pub async fn post_empty(&self, path: &str) -> Resp {
        read(self.http.post(self.url(path)).send().await.expect("request")).await
    }

    /// A POST of a raw body with an explicit content type (415/413/invalid-JSON cases).
    pub async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> Resp {
        read(
            self.http
                .post(self.url(path))
                .header("Content-Type", content_type)
                .body(body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    /// A GET with `X-Service-Key`.
    pub async fn get_with_key(&self, path: &str, raw_key: &str) -> Resp {
        read(self.http.get(self.url(path)).header("X-Service-Key", raw_key).send().await.expect("request"))
            .await
    }

    /// A request builder for anything unusual (headers, raw bodies).
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path))
    }
}

impl TestApp {
    pub async fn start() -> TestApp {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra_env: &[(&'static str, String)]) -> TestApp {
        let db = TestDb::new().await;
        let server = Server::start(&db.url, extra_env);
        TestApp { server, db, extra_env: extra_env.to_vec() }
    }

    /// Kills the server and starts a new process on the same database.
    pub fn restart(&mut self) {
        self.server.kill();
        self.server = Server::start(&self.db.url, &self.extra_env);
    }

    pub fn control(&self) -> Client {
        Client::new(&self.server.control)
    }

    pub fn proxy(&self) -> Client {
        Client::new(&self.server.proxy)
    }

    /// Signs up the first user (owner of a new organization) and returns its
    /// signed-in client.
    pub async fn owner(&self) -> Client {
        self.signup("owner@example.com").await
    }

    pub async fn signup(&self, email: &str) -> Client {
        let c = self.control();
        let r = c.post("/api/auth/signup", json!({ "email": email, "password": PASSWORD })).await;
        assert_eq!(r.status, 201, "signup: {r:?}");
        c
    }

    /// Creates a user through the operator CLI and signs it in.
    pub async fn user_in_org(&self, email: &str, org: &str, role: &str) -> Client {
        let out = Command::new(env!("CARGO_BIN_EXE_spendgate"))
            .args(["user", "create", "--email", email, "--password", PASSWORD, "--org", org, "--role", role])
            .env("SPENDGATE_DATABASE_URL", &self.db.url)
            .env("SPENDGATE_DEFAULT_PLAN", "free")
            .env("SPENDGATE_LOG", "warn")
            .output()
            .expect("run user create");
        assert!(out.status.success(), "user create: {}", String::from_utf8_lossy(&out.stderr));
        self.login(email).await
    }

    /// Runs SQL straight against the test database, for state the API cannot
    /// produce (old timestamps, estimated events, spend moved by the proxy).
    pub async fn exec_sql(&self, sql: &str) {
        if backend_is_postgres() {
            let mut conn = AsyncPgConnection::establish(&self.db.url).await.expect("connect");
            diesel_async::RunQueryDsl::execute(diesel::sql_query(sql), &mut conn).await.expect("execute");
        } else {
            use diesel::Connection as _;
            let path = self.db.url.strip_prefix("sqlite://").expect("sqlite url");
            let mut conn = diesel::SqliteConnection::establish(path).expect("connect");
            diesel::connection::SimpleConnection::batch_execute(&mut conn, "PRAGMA busy_timeout = 5000")
                .expect("pragma");
            diesel::RunQueryDsl::execute(diesel::sql_query(sql), &mut conn).expect("execute");
        }
    }

    /// Rebuilds the rollups from the raw events, in process, after SQL changed
    /// events behind the server's back (the rollups are kept by the accounting
    /// commit only). Returns the number of events read.
    pub async fn rebuild_rollups(&self) -> u64 {
        let pool = spendgate::db::Pool::connect(&self.db.url, 1).expect("connect");
        spendgate::db::rollups::rebuild(&pool).await.expect("rebuild rollups")
    }

    /// Runs an operator command of the binary against the test database; returns
    /// whether it succeeded and its stdout and stderr.
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_spendgate"))
            .args(args)
            .env("SPENDGATE_DATABASE_URL", &self.db.url)
            .env("SPENDGATE_LOG", "warn")
            .output()
            .expect("run spendgate");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    pub async fn login(&self, email: &str) -> Client {
        let c = self.control();
        let r = c.post("/api/auth/login", json!({ "email": email, "password": PASSWORD })).await;
        assert_eq!(r.status, 200, "login: {r:?}");
        c
    }
}

/// An API key created through the dashboard API: (prefixed id, raw key).
pub async fn create_key(owner: &Client, name: &str) -> (String, String) {
    let r = owner.post("/api/keys", json!({ "name": name })).await;
    assert_eq!(r.status, 201, "create key: {r:?}");
    let d = &r.body["data"];
    (d["id"].as_str().unwrap_or_default().to_owned(), d["rawKey"].as_str().unwrap_or_default().to_owned())
}

/// Subscribes the organization to every event kind with an endpoint nobody listens
/// on, so the outbox keeps every event (it keeps only kinds some endpoint wants).
pub async fn subscribe_all(owner: &Client) {
    let r = owner.post("/api/webhooks", json!({ "url": receiver::dead_url() })).await;
    assert_eq!(r.status, 201, "subscribe: {r:?}");
}

/// A client that sends `X-Service-Key` on every request.
pub fn key_client(base: &str, raw_key: &str) -> Client {
    let mut headers = HeaderMap::new();
    headers.insert("x-service-key", raw_key.parse().expect("header value"));
    let http = reqwest::Client::builder().default_headers(headers).build().expect("client");
    Client { http, base: base.to_owned() }
}

/// A minimal valid cost event.
pub fn event(cost: i64) -> Value {
    json!({ "provider": "openai", "model": "gpt-4o", "inputTokens": 100, "outputTokens": 20, "costMicrodollars": cost })
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

impl TestApp {
    /// Runs a query whose single row has one BIGINT column named `n` (e.g.
    /// `SELECT COUNT(*) AS n FROM …`), for state no endpoint shows (the outbox).
    pub async fn query_n(&self, sql: &str) -> i64 {
        if backend_is_postgres() {
            let mut conn = AsyncPgConnection::establish(&self.db.url).await.expect("connect");
            let row: Count = diesel_async::RunQueryDsl::get_result(diesel::sql_query(sql), &mut conn)
                .await
                .expect("query");
            row.n
        } else {
            use diesel::Connection as _;
            let path = self.db.url.strip_prefix("sqlite://").expect("sqlite url");
            let mut conn = diesel::SqliteConnection::establish(path).expect("connect");
            diesel::connection::SimpleConnection::batch_execute(&mut conn, "PRAGMA busy_timeout = 5000")
                .expect("pragma");
            let row: Count =
                diesel::RunQueryDsl::get_result(diesel::sql_query(sql), &mut conn).expect("query");
            row.n
        }
    }

    /// Outbox events of one type.
    pub async fn outbox_count(&self, event_type: &str) -> i64 {
        self.query_n(&format!("SELECT COUNT(*) AS n FROM event_outbox WHERE event_type = '{event_type}'"))
            .await
    }
}
