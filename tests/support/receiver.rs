//! A local webhook receiver: records every call and checks its signature with its
//! own HMAC-SHA256 (the `hmac` crate directly, not the server's signing code).
//!
//! Steering: [`Receiver::fail_next`] answers 503 to the next N calls,
//! [`Receiver::set_status`] answers every call with a fixed status, and
//! [`Receiver::set_delay`] holds each answer back (a slow endpoint).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// One call as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// When the call arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn event_id(&self) -> String {
        self.json()["id"].as_str().unwrap_or_default().to_owned()
    }

    /// `t` of `X-Service-Signature`.
    pub fn timestamp(&self) -> Option<i64> {
        self.header("x-service-signature")?.split(',').find_map(|p| p.strip_prefix("t=")?.parse().ok())
    }

    /// Every `v1` of `X-Service-Signature`.
    pub fn signatures(&self) -> Vec<String> {
        self.header("x-service-signature")
            .unwrap_or_default()
            .split(',')
            .filter_map(|p| p.strip_prefix("v1=").map(str::to_owned))
            .collect()
    }

    /// Whether some `v1` is the HMAC-SHA256 of `"<t>.<body>"` under `secret`.
    pub fn signed_with(&self, secret: &str) -> bool {
        let Some(t) = self.timestamp() else { return false };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(&self.body);
        let expected = hex::encode(mac.finalize().into_bytes());
        self.signatures().contains(&expected)
    }
}

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    fail_next: AtomicUsize,
    status: AtomicU16,
    delay_ms: AtomicU64,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    shared: Arc<Shared>,
    handle: ServerHandle,
}

async fn handle(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    shared.received.lock().unwrap_or_else(PoisonError::into_inner).push(Received {
        headers,
        body: body.to_vec(),
        at: std::time::Instant::now(),
    });
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let failing =
        shared.fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    if failing {
        return HttpResponse::ServiceUnavailable().body("try later");
    }
    match shared.status.load(Ordering::SeqCst) {
        0 => HttpResponse::Ok().body("thanks"),
        s => HttpResponse::build(actix_web::http::StatusCode::from_u16(s).unwrap()).body("no"),
    }
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let data = web::Data::from(Arc::clone(&shared));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new().app_data(data.clone()).default_service(web::to(handle))
                })
                .workers(2)
                .disable_signals()
                .shutdown_timeout(0)
                .listen(listener)
                .expect("receiver listen")
                .run();
                let _ = tx.send(server.handle());
                let _ = server.await;
            });
        });
        let handle = rx.recv().expect("receiver started");
        Receiver { url: format!("http://127.0.0.1:{port}/hook"), shared, handle }
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn fail_next(&self, n: usize) {
        self.shared.fail_next.store(n, Ordering::SeqCst);
    }

    pub fn set_status(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.shared.delay_ms.store(u64::try_from(delay.as_millis()).unwrap(), Ordering::SeqCst);
    }

    /// Waits (up to 30 s, then panics) until `done` holds for the calls received.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        for _ in 0..300 {
            let received = self.received();
            if done(&received) {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("receiver: gave up waiting for {what}; got {:?}", self.received().len());
    }

    /// Waits until calls of `n` distinct events arrived; returns all calls.
    pub async fn wait_for_events(&self, n: usize) -> Vec<Received> {
        self.wait_until(&format!("{n} events"), |r| {
            r.iter().map(Received::event_id).collect::<std::collections::HashSet<_>>().len() >= n
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

/// A URL nothing listens on (a dead endpoint).
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/hook")
}
