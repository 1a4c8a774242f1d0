//! The OpenAPI document against the routes the code registers: every route of the
//! `configure` functions in `crates/api/src/` and `crates/proxy/src/` is documented with its
//! method, every documented operation is registered, and every operation states its
//! security and the error envelope of its error responses.
//!
//! The registered routes are read from the source, where actix registers them
//! (`#[get("…")]` and its siblings, `.route("…", web::post()…)`,
//! `web::resource("…").route(web::get()…)`); any other registration form fails the
//! test until the scanner learns it, so the list cannot silently fall behind.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::support::TestApp;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `(method, path)` with path parameters written `{}`.
type Route = (String, String);

fn normalize(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if !in_param => out.push(c),
            _ => {}
        }
    }
    out
}

/// The string literal starting at `s` (which begins with `"`), and what follows it.
fn literal(s: &str) -> Option<(&str, &str)> {
    let rest = s.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some((&rest[..end], &rest[end + 1..]))
}

/// The method of `web::get()` and its siblings at the start of `s`.
fn web_method(s: &str) -> Option<String> {
    let s = s.trim_start().strip_prefix("web::")?;
    METHODS.iter().find(|m| s.starts_with(&format!("{m}()"))).map(|m| (*m).to_owned())
}

/// The scope the proxy serves its provider routes under a second time, for an
/// operator-defined upstream (`fn provider_routes`, configured at the root and here).
const UPSTREAM_PREFIX: &str = "/upstreams/{upstream}";

/// The routes one source file registers, under `prefix` (the scope).
fn scan(file: &Path, prefix: &str, routes: &mut BTreeSet<Route>) {
    let text = std::fs::read_to_string(file).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    let (mut in_provider_routes, mut provider_routes, mut mirrored) = (false, Vec::new(), false);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let at = || format!("{}:{}: {line}", file.display(), n + 1);
        if line.starts_with("fn provider_routes(") {
            in_provider_routes = true;
        } else if line == "}" {
            in_provider_routes = false;
        }
        if line.contains("web::scope(route::UPSTREAM_PREFIX)") {
            assert!(line.contains(".configure(provider_routes)"), "unknown upstream scope at {}", at());
            mirrored = true;
            continue;
        }
        let before = routes.clone();
        if let Some(attr) = line.strip_prefix("#[") {
            if let Some(m) = METHODS.iter().find(|m| attr.starts_with(&format!("{m}(\""))) {
                let (path, _) = literal(&attr[m.len() + 1..]).unwrap();
                routes.insert(((*m).to_owned(), normalize(&format!("{prefix}{path}"))));
                continue;
            }
            assert!(!attr.starts_with("route("), "unknown registration form at {}", at());
        }
        if let Some(i) = line.find("web::resource(") {
            let (path, rest) = literal(&line[i + "web::resource(".len()..]).expect("a literal resource path");
            let method = rest
                .strip_prefix(").route(")
                .and_then(web_method)
                .unwrap_or_else(|| panic!("unknown registration form at {}", at()));
            routes.insert((method, normalize(&format!("{prefix}{path}"))));
        } else if let Some(i) = line.find(".route(") {
            let (path, rest) = literal(&line[i + ".route(".len()..])
                .unwrap_or_else(|| panic!("unknown registration form at {}", at()));
            let method = rest
                .strip_prefix(", ")
                .and_then(web_method)
                .unwrap_or_else(|| panic!("unknown registration form at {}", at()));
            routes.insert((method, normalize(&format!("{prefix}{path}"))));
        } else if let Some(i) = line.find("web::scope(") {
            let (scope, _) = literal(&line[i + "web::scope(".len()..]).unwrap();
            assert_eq!(scope, prefix, "a scope the scanner does not know, at {}", at());
        }
        if in_provider_routes {
            provider_routes.extend(routes.difference(&before).cloned());
        }
    }
    if mirrored {
        assert!(!provider_routes.is_empty(), "{}: no provider routes found", file.display());
        for (m, p) in provider_routes {
            routes.insert((m, normalize(&format!("{UPSTREAM_PREFIX}{p}"))));
        }
    }
}

fn registered_routes() -> BTreeSet<Route> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut routes = BTreeSet::new();
    for (dir, prefix) in [("api/src", "/api"), ("proxy/src", "")] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            // The dashboard's files are served beside the control plane, not part of it.
            let dashboard = path.file_name().is_some_and(|n| n == "dashboard.rs");
            if path.extension().is_some_and(|e| e == "rs") && !dashboard {
                scan(&path, prefix, &mut routes);
            }
        }
    }
    routes
}

fn documented_operations(doc: &Value) -> BTreeSet<Route> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                ops.insert((m.to_owned(), normalize(path)));
            }
        }
    }
    ops
}

/// A documented path is served by a registered pattern when the segments are equal,
/// or the registered segment is a parameter and the documented one a parameter
/// with a literal suffix (`/v1beta/models/{tail}` serves `{model}:generateContent`).
fn serves(registered: &str, documented: &str) -> bool {
    let (r, d): (Vec<_>, Vec<_>) = (registered.split('/').collect(), documented.split('/').collect());
    r.len() == d.len() && r.iter().zip(&d).all(|(r, d)| r == d || (*r == "{}" && d.starts_with("{}:")))
}

fn covered(route: &Route, by: &BTreeSet<Route>, registered_side: bool) -> bool {
    by.iter().any(|(m, p)| {
        m == &route.0 && if registered_side { serves(&route.1, p) } else { serves(p, &route.1) }
    })
}

async fn served_document() -> Value {
    let app = TestApp::start().await;
    let r = app.control().get("/api/openapi.json").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body
}

#[tokio::test]
async fn every_registered_route_is_documented_and_every_operation_registered() {
    let doc = served_document().await;
    let registered = registered_routes();
    assert!(registered.len() > 40, "the scanner found only {registered:?}");
    let documented = documented_operations(&doc);
    let undocumented: Vec<_> = registered.iter().filter(|r| !covered(r, &documented, true)).collect();
    assert!(undocumented.is_empty(), "registered but not in /api/openapi.json: {undocumented:?}");
    let unrouted: Vec<_> = documented.iter().filter(|d| !covered(d, &registered, false)).collect();
    assert!(unrouted.is_empty(), "documented but not registered: {unrouted:?}");
}

#[tokio::test]
async fn every_operation_states_its_security_and_error_bodies() {
    let doc = served_document().await;
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for name in ["serviceKey", "session", "internalSecret", "cronSecret"] {
        assert!(schemes.contains_key(name), "security scheme {name} missing");
    }
    assert_eq!(schemes["serviceKey"]["name"], "X-Service-Key");
    assert_eq!(schemes["session"]["in"], "cookie");
    assert_eq!(schemes["session"]["name"], "svc_session");
    assert_eq!(schemes["cronSecret"]["scheme"], "bearer");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let security = op["security"].as_array().unwrap_or_else(|| panic!("{m} {path}: no security"));
            for requirement in security {
                for name in requirement.as_object().unwrap().keys() {
                    assert!(schemes.contains_key(name), "{m} {path}: unknown scheme {name}");
                }
            }
            let responses = op["responses"].as_object().unwrap();
            assert!(!responses.is_empty(), "{m} {path}: no responses");
            for (status, response) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    let content = response["content"].as_object();
                    assert!(
                        content.is_some_and(|c| !c.is_empty()),
                        "{m} {path}: {status} has no body schema"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn path_parameters_are_those_of_the_path_template() {
    let doc = served_document().await;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let template: BTreeSet<&str> = path.split('{').skip(1).filter_map(|s| s.split('}').next()).collect();
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let declared: BTreeSet<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter().filter(|p| p["in"] == "path").filter_map(|p| p["name"].as_str()).collect()
                })
                .unwrap_or_default();
            assert_eq!(declared, template, "{m} {path}: path parameters");
        }
    }
}

#[test]
fn the_scanner_reads_every_registration_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.rs");
    std::fs::write(
        &file,
        "#[get(\"/a/{id}\")]\n.route(\"/b\", web::post().to(h))\n\
         .service(web::resource(\"/c/\").route(web::get().to(h)))\n",
    )
    .unwrap();
    let mut routes = BTreeSet::new();
    scan(&file, "/p", &mut routes);
    let expected: BTreeSet<Route> = [("get", "/p/a/{}"), ("post", "/p/b"), ("get", "/p/c/")]
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
    assert_eq!(routes, expected);
    std::fs::write(&file, ".service(web::resource(\"/d\").to(h))\n").unwrap();
    let unknown = std::panic::catch_unwind(|| scan(&file, "/p", &mut BTreeSet::new()));
    assert!(unknown.is_err(), "an unknown form must fail the scan");
    assert!(serves("/v1beta/models/{}", "/v1beta/models/{}:generateContent"));
    assert!(!serves("/api/orgs/{}", "/api/orgs/me"));
}

#[tokio::test]
async fn operation_ids_are_unique_and_proxy_operations_name_the_proxy_server() {
    let doc = served_document().await;
    let mut ids = BTreeSet::new();
    let mut proxy_ops = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{m} {path}: no operationId"));
            assert!(ids.insert(id.to_owned()), "operationId {id} is used twice (again at {m} {path})");
        }
        let servers = item
            .get("servers")
            .or_else(|| METHODS.iter().filter_map(|m| item.get(*m)).find_map(|op| op.get("servers")));
        if path.starts_with("/api/") {
            assert!(servers.is_none(), "{path}: a control-plane path must use the document's server");
        } else {
            let servers = servers.unwrap_or_else(|| panic!("{path}: a proxy path without its server"));
            assert_eq!(servers[0]["url"], "{proxyUrl}", "{path}");
            assert!(servers[0]["variables"]["proxyUrl"]["default"].is_string(), "{path}");
            proxy_ops += 1;
        }
    }
    assert!(proxy_ops >= 20, "only {proxy_ops} proxy paths");
    assert!(doc["paths"]["/upstreams/{upstream}/v1/chat/completions"]["post"].is_object());
    assert!(
        doc["paths"]["/upstreams/{upstream}/v1beta/models/{model}:streamGenerateContent"]["post"].is_object()
    );
    assert!(doc["servers"][0]["description"].as_str().unwrap().contains("control"));
}

/// The default of every proxy path's `{proxyUrl}` server variable.
fn proxy_url_defaults(doc: &Value) -> BTreeSet<String> {
    let mut defaults = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if path.starts_with("/api/") {
            continue;
        }
        let servers = item
            .get("servers")
            .or_else(|| METHODS.iter().filter_map(|m| item.get(*m)).find_map(|op| op.get("servers")))
            .unwrap_or_else(|| panic!("{path}: a proxy path without its server"));
        let default = servers[0]["variables"]["proxyUrl"]["default"].as_str();
        defaults.insert(default.unwrap_or_else(|| panic!("{path}: no proxyUrl default")).to_owned());
    }
    defaults
}

#[tokio::test]
async fn proxy_operations_name_the_address_this_instance_serves_them_on() {
    // The test server's proxy listens on an ephemeral port, never the default 8787.
    let app = TestApp::start().await;
    assert!(!app.server.proxy.ends_with(":8787"), "{}", app.server.proxy);
    let doc = app.control().get("/api/openapi.json").await.body;
    assert_eq!(proxy_url_defaults(&doc), BTreeSet::from([app.server.proxy.clone()]));

    // The operator's public address wins over the listener's.
    let public = "https://gateway.example.com/proxy";
    let app = TestApp::start_with(&[("SPENDGATE_PROXY_PUBLIC_URL", format!("{public}/"))]).await;
    let doc = app.control().get("/api/openapi.json").await.body;
    assert_eq!(proxy_url_defaults(&doc), BTreeSet::from([public.to_owned()]));

    // A proxy on every interface is named by the host the document was asked on.
    let app = TestApp::start_with(&[("SPENDGATE_PROXY_ADDR", "0.0.0.0:0".to_owned())]).await;
    let port = app.server.proxy.rsplit(':').next().unwrap().to_owned();
    let doc = app.control().get("/api/openapi.json").await.body;
    assert_eq!(proxy_url_defaults(&doc), BTreeSet::from([format!("http://127.0.0.1:{port}")]));
}
