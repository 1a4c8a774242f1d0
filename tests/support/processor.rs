//! A fake payment processor that answers like Stripe's REST API for what margins
//! read: `GET /v1/customers`, `/v1/invoices`, `/v1/credit_notes`, `/v1/refunds`.
//!
//! - Auth: `Authorization: Bearer <key>`. An unknown key is 401 with Stripe's error
//!   body (`invalid_request_error`, "Invalid API Key provided: rk_****…"); a
//!   restricted key registered without a resource's permission is 403 with
//!   Stripe's permission message.
//! - Lists: newest first (`created` descending, then id), `limit` (default 10, at
//!   most 100, and at most [`FakeProcessor::set_page_cap`] to force pagination),
//!   `starting_after`, `has_more`, `url`, `object: "list"`; filters
//!   `created[gte]`, `created[gt]`, `created[lt]`, `created[lte]`, invoices'
//!   `status`; refunds expand `data.charge` on `expand[]=data.charge`.
//! - Objects are seeded from tests with amounts in the currency's smallest unit.
//!
//! Every request is recorded (path and query) for assertions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};

#[derive(Default)]
struct State {
    /// Key -> resources it may read (`None`: everything).
    keys: BTreeMap<String, Option<BTreeSet<String>>>,
    objects: BTreeMap<&'static str, Vec<Value>>,
    charges: BTreeMap<String, Value>,
    page_cap: usize,
    requests: Vec<(String, String)>,
    /// Requests to this path wait for a permit of the semaphore.
    gate: Option<(String, Arc<tokio::sync::Semaphore>)>,
}

pub struct FakeProcessor {
    pub base: String,
    state: Arc<Mutex<State>>,
    handle: ServerHandle,
}

const RESOURCES: [&str; 4] = ["customers", "invoices", "credit_notes", "refunds"];

impl FakeProcessor {
    pub fn start() -> FakeProcessor {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind fake processor");
        let port = listener.local_addr().expect("address").port();
        let state = Arc::new(Mutex::new(State { page_cap: 100, ..State::default() }));
        let data = web::Data::from(Arc::clone(&state));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new().app_data(data.clone()).default_service(web::to(handle))
                })
                .workers(1)
                .disable_signals()
                .shutdown_timeout(0)
                .listen(listener)
                .expect("listen")
                .run();
                let _ = tx.send(server.handle());
                let _ = server.await;
            });
        });
        let handle = rx.recv().expect("fake processor started");
        FakeProcessor { base: format!("http://127.0.0.1:{port}"), state, handle }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A key with every read permission.
    pub fn add_key(&self, key: &str) {
        self.with(|s| s.keys.insert(key.to_owned(), None));
    }

    /// A restricted key that may read only `resources` (e.g. `["customers"]`).
    pub fn add_restricted_key(&self, key: &str, resources: &[&str]) {
        let set = resources.iter().map(|r| (*r).to_owned()).collect();
        self.with(|s| s.keys.insert(key.to_owned(), Some(set)));
    }

    pub fn set_page_cap(&self, cap: usize) {
        self.with(|s| s.page_cap = cap);
    }

    pub fn add_customer(&self, id: &str, name: &str, email: &str, metadata: Value, created: i64) {
        let obj = json!({ "id": id, "object": "customer", "name": name, "email": email, "metadata": metadata,
            "created": created, "currency": "usd", "livemode": false });
        self.with(|s| s.objects.entry("customers").or_default().push(obj));
    }

    /// A paid invoice of `total` (smallest unit) including `tax`, paid at `created`.
    pub fn add_invoice(&self, id: &str, customer: &str, currency: &str, total: i64, tax: i64, created: i64) {
        let obj = json!({ "id": id, "object": "invoice", "customer": customer, "currency": currency,
            "status": "paid", "created": created, "subtotal": total - tax, "tax": tax, "total": total,
            "total_excluding_tax": total - tax, "amount_paid": total, "charge": format!("ch_{id}"),
            "status_transitions": { "paid_at": created, "finalized_at": created } });
        let charge = json!({ "id": format!("ch_{id}"), "object": "charge", "customer": customer, "invoice": id,
            "amount": total, "currency": currency });
        self.with(|s| {
            s.objects.entry("invoices").or_default().push(obj);
            s.charges.insert(format!("ch_{id}"), charge);
        });
    }

    /// An invoice in another status (never revenue).
    pub fn add_open_invoice(&self, id: &str, customer: &str, total: i64, created: i64) {
        let obj = json!({ "id": id, "object": "invoice", "customer": customer, "currency": "usd", "status": "open",
            "created": created, "subtotal": total, "tax": 0, "total": total, "total_excluding_tax": total,
            "status_transitions": { "paid_at": null } });
        self.with(|s| s.objects.entry("invoices").or_default().push(obj));
    }

    pub fn add_credit_note(
        &self,
        id: &str,
        customer: &str,
        total: i64,
        tax: i64,
        created: i64,
        refund: Option<&str>,
    ) {
        let obj = json!({ "id": id, "object": "credit_note", "customer": customer, "currency": "usd",
            "status": "issued", "created": created, "total": total, "total_excluding_tax": total - tax,
            "amount": total, "refund": refund });
        self.with(|s| s.objects.entry("credit_notes").or_default().push(obj));
    }

    /// A succeeded refund of `amount` on the charge of invoice `invoice`.
    pub fn add_refund(&self, id: &str, invoice: &str, amount: i64, created: i64) {
        let obj = json!({ "id": id, "object": "refund", "amount": amount, "currency": "usd", "created": created,
            "status": "succeeded", "charge": format!("ch_{invoice}") });
        self.with(|s| s.objects.entry("refunds").or_default().push(obj));
    }

    /// Changes a field of a seeded object (e.g. a refund's `status`).
    pub fn set_field(&self, resource: &'static str, id: &str, field: &str, value: Value) {
        self.with(|s| {
            for o in s.objects.entry(resource).or_default().iter_mut().filter(|o| o["id"] == id) {
                o[field] = value.clone();
            }
        });
    }

    /// Holds every request to `path` (recorded on arrival) until [`Self::open_gate`].
    pub fn close_gate(&self, path: &str) {
        self.with(|s| s.gate = Some((path.to_owned(), Arc::new(tokio::sync::Semaphore::new(0)))));
    }

    pub fn open_gate(&self) {
        self.with(|s| {
            if let Some((_, sem)) = s.gate.take() {
                sem.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
            }
        });
    }

    /// Requests received so far: `(path, query)`.
    pub fn requests(&self) -> Vec<(String, String)> {
        self.with(|s| s.requests.clone())
    }

    pub fn requests_to(&self, path: &str) -> usize {
        self.requests().iter().filter(|(p, _)| p == path).count()
    }
}

impl Drop for FakeProcessor {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

fn error(status: u16, message: &str) -> HttpResponse {
    let code = actix_web::http::StatusCode::from_u16(status).unwrap_or_default();
    HttpResponse::build(code)
        .json(json!({ "error": { "type": "invalid_request_error", "message": message } }))
}

fn masked(key: &str) -> String {
    let tail: String = key.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{}****{tail}", &key[..key.len().min(8)])
}

async fn handle(req: HttpRequest, data: web::Data<Mutex<State>>) -> HttpResponse {
    let gate = {
        let mut s = data.lock().unwrap_or_else(PoisonError::into_inner);
        s.requests.push((req.path().to_owned(), req.query_string().to_owned()));
        s.gate.as_ref().filter(|(p, _)| p == req.path()).map(|(_, sem)| Arc::clone(sem))
    };
    if let Some(sem) = gate {
        let _ = sem.acquire().await;
    }
    let s = data.lock().unwrap_or_else(PoisonError::into_inner);
    let key = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    let Some(resource) = req.path().strip_prefix("/v1/").filter(|r| RESOURCES.contains(r)) else {
        return error(404, &format!("Unrecognized request URL (GET: {}).", req.path()));
    };
    let Some(perms) = s.keys.get(&key).cloned() else {
        return error(401, &format!("Invalid API Key provided: {}", masked(&key)));
    };
    if perms.is_some_and(|p| !p.contains(resource)) {
        return error(
            403,
            &format!(
                "The provided key '{}' does not have the required permissions for this endpoint on account \
                 'acct_fake'. Having the 'rak_{}_read' permission would allow this request to continue.",
                masked(&key),
                resource.trim_end_matches('s')
            ),
        );
    }
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(req.query_string().as_bytes()).into_owned().collect();
    let get = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let num = |name: &str| get(name).and_then(|v| v.parse::<i64>().ok());
    let limit = match get("limit").map(|v| v.parse::<usize>()) {
        None => 10,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => return error(400, "Invalid integer: limit must be between 1 and 100"),
    }
    .min(s.page_cap);
    let mut items: Vec<Value> = s.objects.get(resource).cloned().unwrap_or_default();
    items.retain(|o| {
        let c = o["created"].as_i64().unwrap_or(0);
        num("created[gte]").is_none_or(|v| c >= v)
            && num("created[gt]").is_none_or(|v| c > v)
            && num("created[lt]").is_none_or(|v| c < v)
            && num("created[lte]").is_none_or(|v| c <= v)
            && get("status").is_none_or(|st| o["status"] == st.as_str())
    });
    items.sort_by(|a, b| {
        b["created"]
            .as_i64()
            .cmp(&a["created"].as_i64())
            .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
    });
    if let Some(after) = get("starting_after") {
        let Some(pos) = items.iter().position(|o| o["id"] == after.as_str()) else {
            return error(400, &format!("No such object: '{after}'"));
        };
        items.drain(..=pos);
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    if resource == "refunds" && query.iter().any(|(k, v)| k == "expand[]" && v == "data.charge") {
        for r in &mut items {
            if let Some(ch) = r["charge"].as_str().and_then(|id| s.charges.get(id)) {
                r["charge"] = ch.clone();
            }
        }
    }
    HttpResponse::Ok()
        .json(json!({ "object": "list", "url": req.path(), "has_more": has_more, "data": items }))
}
