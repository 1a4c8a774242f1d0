//! `exactCeiling`: a strict budget whose room does not pay for a call's whole estimate
//! admits it with its output bound clamped to what the room pays for, on every
//! provider route, streaming or not, and its spend never passes its limit: against a
//! fake provider that honours the output bound it is sent and bills the densest
//! tokenization there is (a token per byte of the body).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::proxy::{setup, Setup};
use crate::support::{backend_is_postgres, create_key, key_client, read, Client, Resp, Server};

const CLAMPED: &str = "x-service-clamped-output-tokens";

/// The fake provider bills every output token it may and a token per body byte.
fn greedy() -> Value {
    json!({ "honour_bound": true, "input_from_bytes": true, "usage": { "output": 1_000_000 } })
}

/// A fresh key with a strict `exactCeiling` budget of `limit` µ$.
async fn exact_key(s: &Setup, limit: i64) -> (String, Client, String) {
    let (key_id, raw) = create_key(&s.owner, "agent").await;
    let r = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": limit,
                "exactCeiling": true, "loopMaxCalls": 0 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["exactCeiling"], true, "{r:?}");
    (key_id, key_client(&s.app.server.proxy, &raw), raw)
}

/// The key's settled spend once nothing is reserved any more (the budget actors
/// settle a call after its cost is committed).
async fn settled_spend(s: &crate::support::TestApp, owner: &Client, key_id: &str, raw: &str) -> i64 {
    let mut last = (Value::Null, Value::Null);
    for _ in 0..200 {
        let list = owner.get("/api/budgets").await;
        let b =
            list.body["data"].as_array().unwrap().iter().find(|b| b["entityId"] == key_id).cloned().unwrap();
        let status = s.control().get_with_key("/api/budgets/status", raw).await;
        let live = status.body["entities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["entityType"] == "api_key")
            .cloned()
            .unwrap();
        let spend = b["spendMicrodollars"].as_i64().unwrap();
        if spend > 0 && live["spendMicrodollars"].as_i64() == Some(spend) {
            return spend;
        }
        last = (b, live);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("spend never settled: {last:?}");
}

struct Case {
    name: &'static str,
    path: &'static str,
    body: Value,
    /// Where the fake provider read the output bound.
    bound: fn(&Value) -> Option<u64>,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for stream in [false, true] {
        out.push(Case {
            name: if stream { "chat stream" } else { "chat" },
            path: "/v1/chat/completions",
            body: json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }],
                "max_tokens": 16_000, "stream": stream, "mock": greedy() }),
            bound: |b| b["max_tokens"].as_u64(),
        });
        out.push(Case {
            name: if stream { "responses stream" } else { "responses" },
            path: "/v1/responses",
            body: json!({ "model": "gpt-4o-mini", "input": "hi", "stream": stream, "mock": greedy() }),
            bound: |b| b["max_output_tokens"].as_u64(),
        });
        out.push(Case {
            name: if stream { "messages stream" } else { "messages" },
            path: "/v1/messages",
            body: json!({ "model": "claude-3-5-haiku-20241022", "max_tokens": 8_000, "stream": stream,
                "messages": [{ "role": "user", "content": "hi" }], "mock": greedy() }),
            bound: |b| b["max_tokens"].as_u64(),
        });
        out.push(Case {
            name: if stream { "streamGenerateContent" } else { "generateContent" },
            path: if stream {
                "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
            } else {
                "/v1beta/models/gemini-2.0-flash:generateContent"
            },
            body: json!({ "contents": [{ "parts": [{ "text": "hi" }] }], "mock": greedy() }),
            bound: |b| b["generationConfig"]["maxOutputTokens"].as_u64(),
        });
    }
    out
}

async fn send(client: &Client, path: &str, body: &Value) -> Resp {
    let req = client.http.post(format!("{}{path}", client.base)).header("authorization", "Bearer p-key");
    let req = if path.contains("/v1/messages") { req.header("x-api-key", "p-key") } else { req };
    read(req.json(body).send().await.expect("request")).await
}

#[tokio::test]
async fn every_route_streaming_or_not_is_clamped_to_the_room_left() {
    const LIMIT: i64 = 2_000;
    let s = setup().await;
    for case in cases() {
        let (key_id, client, raw) = exact_key(&s, LIMIT).await;
        let before = s.mock.count();
        let r = send(&client, case.path, &case.body).await;
        assert_eq!(r.status, 200, "{}: {r:?}", case.name);
        let n: u64 =
            r.header(CLAMPED).unwrap_or_else(|| panic!("{}: no clamp header", case.name)).parse().unwrap();
        assert!(n >= 16, "{}: clamped to {n}", case.name);
        assert_eq!(s.mock.count(), before + 1);
        let sent = s.mock.last().json();
        assert_eq!((case.bound)(&sent), Some(n), "{}: the provider saw {sent}", case.name);
        let spend = settled_spend(&s.app, &s.owner, &key_id, &raw).await;
        assert!(spend <= LIMIT, "{}: spend {spend} passed the limit {LIMIT}", case.name);
        // The clamp uses the room: most of it is spent.
        assert!(spend > LIMIT / 2, "{}: spend {spend} of {LIMIT}", case.name);
    }
}

#[tokio::test]
async fn calls_until_refusal_never_pass_the_limit_and_the_refusal_says_why_in_dollars() {
    const LIMIT: i64 = 2_000;
    let s = setup().await;
    let (key_id, client, raw) = exact_key(&s, LIMIT).await;
    // Each call would use 700 output tokens (420 µ$): the last ones are clamped.
    let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }],
        "max_tokens": 16_000,
        "mock": { "honour_bound": true, "input_from_bytes": true, "usage": { "output": 700 } } });
    let (mut admitted, mut clamped) = (0, 0);
    let refusal = loop {
        let r = send(&client, "/v1/chat/completions", &body).await;
        if r.status != 200 {
            break r;
        }
        admitted += 1;
        clamped += usize::from(r.header(CLAMPED).is_some());
        let spend = settled_spend(&s.app, &s.owner, &key_id, &raw).await;
        assert!(spend <= LIMIT, "spend {spend} passed the limit {LIMIT} after {admitted} calls");
        assert!(admitted < 50, "never refused");
    };
    assert_eq!((refusal.status, refusal.code()), (429, "budget_exceeded"), "{refusal:?}");
    assert!(admitted >= 4, "admitted {admitted}: {refusal:?}");
    assert!(clamped >= 1, "no call was clamped");
    let d = &refusal.body["error"]["details"];
    let (reserved, room) =
        (d["reserved_microdollars"].as_i64().unwrap(), d["room_microdollars"].as_i64().unwrap());
    let spend = settled_spend(&s.app, &s.owner, &key_id, &raw).await;
    assert_eq!(room, LIMIT - spend, "{d}");
    // Refused only when the room does not pay for the prompt and 16 output tokens.
    assert!(room < reserved, "refused with {room} left for a floor of {reserved}");
    assert_eq!(d["exact_ceiling"], true);
    assert_eq!(d["budget_limit_microdollars"], LIMIT);
    let message = refusal.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("left") && message.contains("$0.00"), "{message}");
}

/// An agent looping fast on a small budget: every call is clamped (its estimate does
/// not fit), and each next call goes out the moment the previous answer ends. A
/// clamped call holds the whole room left while it runs; its answer ends only once
/// the room beyond its cost is given back, so the next call finds it.
#[tokio::test]
async fn the_next_call_sent_as_a_clamped_answer_ends_finds_the_room() {
    const LIMIT: i64 = 5_000;
    let s = setup().await;
    let (key_id, client, raw) = exact_key(&s, LIMIT).await;
    let mut calls = 0;
    for call in 0..16 {
        // 16,000 output tokens would cost 9,600 µ$: never fits, always clamped. Each
        // call uses 60 output tokens and its prompt's bytes (about 130 µ$).
        let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }],
            "max_tokens": 16_000, "stream": call % 2 == 1,
            "mock": { "honour_bound": true, "input_from_bytes": true, "usage": { "output": 60 } } });
        let r = send(&client, "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "call {call}, right after the previous answer: {r:?}");
        assert!(r.header(CLAMPED).is_some(), "call {call} was not clamped");
        calls += 1;
    }
    let spend = settled_spend(&s.app, &s.owner, &key_id, &raw).await;
    assert!(spend <= LIMIT, "spend {spend} passed the limit");
    assert!(spend < calls * 400, "{spend} µ$ for {calls} small calls");
}

/// A session limit on an `exactCeiling` budget clamps like the budget's own limit: a
/// session's last room is used, never passed, and refused only below the floor.
#[tokio::test]
async fn a_session_limit_on_an_exact_ceiling_budget_clamps_too() {
    const SESSION_LIMIT: i64 = 1_500;
    let s = setup().await;
    let (key_id, raw) = create_key(&s.owner, "agent").await;
    let r = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000_000,
                "sessionLimitMicrodollars": SESSION_LIMIT, "exactCeiling": true, "loopMaxCalls": 0 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }],
        "max_tokens": 16_000, "mock": greedy() });
    let url = format!("{}/v1/chat/completions", s.app.server.proxy);
    let call = |session: &'static str| {
        let req = reqwest::Client::new().post(&url).header("x-service-key", &raw);
        let req = req.header("authorization", "Bearer p-key").header("x-service-session", session);
        let body = body.clone();
        async move { read(req.json(&body).send().await.expect("request")).await }
    };
    let first = call("s-1").await;
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.header(CLAMPED).is_some(), "the session's room clamps: {first:?}");
    // The greedy provider spent the session's room: below the floor now.
    let second = call("s-1").await;
    assert_eq!((second.status, second.code()), (429, "session_limit_exceeded"), "{second:?}");
    // Another session has its own room.
    let other = call("s-2").await;
    assert_eq!(other.status, 200, "{other:?}");
    let spend = settled_spend(&s.app, &s.owner, &key_id, &raw).await;
    assert!(spend <= 2 * SESSION_LIMIT, "spend {spend} passed two sessions' limits");
    assert!(spend > SESSION_LIMIT, "spend {spend}: the sessions' room was used");
}

#[tokio::test]
async fn without_exact_ceiling_the_refusal_names_the_reservation_the_room_and_the_way_out() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 500_000 }))
        .await;
    // gpt-5 without an output bound: 128,000 tokens at $10/M is $1.28.
    let body = json!({ "model": "gpt-5", "messages": [{ "role": "user", "content": "hi" }] });
    let r = s.send("/v1/chat/completions", &body, &[]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");
    let d = &r.body["error"]["details"];
    assert!(d["reserved_microdollars"].as_i64().unwrap() > 1_280_000, "{d}");
    assert_eq!(d["room_microdollars"], 500_000);
    assert_eq!(
        (d["budget_spend_microdollars"].as_i64(), d["budget_reserved_microdollars"].as_i64()),
        (Some(0), Some(0))
    );
    assert_eq!(d["estimated_request_cost_microdollars"], d["reserved_microdollars"]);
    assert_eq!(d["exact_ceiling"], false);
    assert!(d["recovery"].as_str().unwrap().contains("exactCeiling"), "{d}");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("would reserve $1.28") && message.contains("$0.500000 left"), "{message}");
    assert_eq!(s.mock.count(), 0);
    // The same call on an exactCeiling budget goes out clamped.
    let (_, client, _) = exact_key(&s, 500_000).await;
    let r = send(&client, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    let n: u64 = r.header(CLAMPED).unwrap().parse().unwrap();
    assert_eq!(
        s.mock.last().json()["max_completion_tokens"],
        n,
        "a reasoning model takes max_completion_tokens"
    );
}

#[tokio::test]
async fn a_dense_prompt_never_settles_above_its_reservation() {
    let s = setup().await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 10_000_000 }))
        .await;
    let prompt = "東京の天気は？コード: fn main() { println!(\"{}\", 1 + 1); } ".repeat(40);
    for stream in [false, true] {
        let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": prompt }],
            "max_tokens": 50, "stream": stream,
            "mock": { "honour_bound": true, "input_from_bytes": true, "usage": { "output": 50 } } });
        let r = s.chat(body).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    // A provider-run tool the estimate cannot bound does pass it, and says so.
    let body = json!({ "model": "gpt-4o-mini", "input": "hi", "max_output_tokens": 10,
        "mock": { "builtin_tools": ["web_search_call", "web_search_call"] } });
    assert_eq!(s.send("/v1/responses", &body, &[]).await.status, 200);
    let events = s.events(3).await;
    let over: Vec<_> = events.iter().filter(|e| e["tags"]["_svc_over_reservation"].is_string()).collect();
    assert_eq!(over.len(), 1, "{events:#?}");
    assert_eq!(over[0]["model"], "gpt-4o-mini");
    assert!(over[0]["tags"]["_svc_builtin_tool_calls"].is_string(), "{:?}", over[0]);
    let r = s.app.proxy().request(reqwest::Method::GET, "/health/metrics").header("Accept", "text/plain");
    let metrics = read(r.send().await.unwrap()).await.text;
    assert!(metrics.contains("proxy_over_reservation_total{measure=\"calls\"} 1"), "{metrics}");
}

#[tokio::test]
async fn what_the_prompt_size_does_not_bound_is_refused_on_an_exact_ceiling_budget() {
    let s = setup().await;
    let (_, client, _) = exact_key(&s, 1_000_000).await;
    let image = json!({ "model": "gpt-4o-mini", "max_tokens": 10, "messages": [{ "role": "user", "content": [
        { "type": "image_url", "image_url": { "url": "https://example.com/cat.png" } }] }] });
    let r = send(&client, "/v1/chat/completions", &image).await;
    assert_eq!((r.status, r.code()), (400, "invalid_input"), "{r:?}");
    assert_eq!(r.body["error"]["details"]["unbounded_part"], "a non-text part (image_url)");
    let search = json!({ "model": "gpt-4o-mini", "input": "hi", "tools": [{ "type": "web_search" }] });
    let r = send(&client, "/v1/responses", &search).await;
    assert_eq!((r.status, r.code()), (400, "invalid_input"), "{r:?}");
    // A thinking budget the room cannot keep below the clamped bound.
    let (_, small, _) = exact_key(&s, 3_000).await;
    let thinking = json!({ "model": "claude-3-5-haiku-20241022", "max_tokens": 8_000,
        "thinking": { "type": "enabled", "budget_tokens": 4_000 },
        "messages": [{ "role": "user", "content": "hi" }] });
    let r = send(&small, "/v1/messages", &thinking).await;
    assert_eq!((r.status, r.code()), (400, "invalid_input"), "{r:?}");
    assert_eq!(r.body["error"]["details"]["thinking_budget_tokens"], 4_000);
    assert_eq!(s.mock.count(), 0, "nothing was forwarded");
    let denied = s.owner.get("/api/cost-events?limit=100&budgetStatus=denied").await;
    assert_eq!(
        denied.body["data"].as_array().map(Vec::len),
        Some(3),
        "each refusal leaves a record: {denied:?}"
    );
    // Text within the room goes out untouched: no clamp, no header.
    let text = json!({ "model": "gpt-4o-mini", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] });
    let r = send(&client, "/v1/chat/completions", &text).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header(CLAMPED), None);
    assert_eq!(s.mock.last().body, serde_json::to_vec(&text).unwrap());
}

#[tokio::test]
async fn exact_ceiling_is_a_strict_budget_setting_shown_everywhere() {
    let s = setup().await;
    let r = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000,
                "policy": "soft_block", "exactCeiling": true }),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "validation_error"), "{r:?}");
    assert!(r.text.contains("exactCeiling"), "{r:?}");
    let r = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000 }),
        )
        .await;
    assert_eq!(r.body["exactCeiling"], false, "{r:?}");
    let r = s
        .owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000, "exactCeiling": true }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["exactCeiling"], true);
    let list = s.owner.get("/api/budgets").await;
    assert_eq!(list.body["data"][0]["exactCeiling"], true);
    let status = s.app.control().get_with_key("/api/budgets/status", &s.raw).await;
    assert_eq!(status.body["entities"][0]["exactCeiling"], true, "{status:?}");
}

/// 200 concurrent calls through two instances sharing PostgreSQL against one
/// `exactCeiling` budget: spend never passes the limit, and a call is refused only
/// when the room left (as the database saw it) did not pay for its floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_with_200_concurrent_calls_never_pass_an_exact_ceiling() {
    if !backend_is_postgres() {
        return;
    }
    const LIMIT: i64 = 30_000;
    let mock = crate::support::mock::MockUpstream::start();
    let env =
        [("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()), ("SPENDGATE_SHARED_BUDGETS", "1".to_owned())];
    let app = crate::support::TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (key_id, raw) = create_key(&owner, "agent").await;
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": LIMIT,
                "exactCeiling": true, "loopMaxCalls": 0 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let second = Server::start(&app.db.url, &env);
    let proxies = [key_client(&app.server.proxy, &raw), key_client(&second.proxy, &raw)];
    // Each call may use 400 output tokens (240 µ$ and its prompt): the budget pays for
    // about a hundred, the last of them clamped.
    let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "hi" }],
        "max_tokens": 400,
        "mock": { "honour_bound": true, "input_from_bytes": true, "usage": { "output": 400 }, "delay_ms": 10 } });
    let (ok, clamped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let problems = Arc::new(Mutex::new(Vec::new()));
    let calls = (0..200).map(|i| {
        let (client, body, ok, clamped, problems) =
            (&proxies[i % 2], body.clone(), ok.clone(), clamped.clone(), problems.clone());
        async move {
            let r = client.post("/v1/chat/completions", body).await;
            match (r.status, r.code()) {
                (200, _) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                    if r.header(CLAMPED).is_some() {
                        clamped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                (429, "budget_exceeded") => {
                    let d = &r.body["error"]["details"];
                    let (room, floor) =
                        (d["room_microdollars"].as_i64(), d["reserved_microdollars"].as_i64());
                    if !matches!((room, floor), (Some(room), Some(floor)) if room < floor) {
                        problems.lock().unwrap().push(format!("refused with room: {r:?}"));
                    }
                }
                _ => problems.lock().unwrap().push(format!("{r:?}")),
            }
        }
    });
    futures_util::future::join_all(calls).await;
    let problems = problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "{problems:#?}");
    let spend = settled_spend(&app, &owner, &key_id, &raw).await;
    let ok = ok.load(Ordering::Relaxed);
    assert!(spend <= LIMIT, "spend {spend} passed the limit {LIMIT} ({ok} calls)");
    assert!((50..200).contains(&ok), "admitted {ok}");
    assert!(clamped.load(Ordering::Relaxed) >= 1, "no call was clamped");
    drop(second);
}
