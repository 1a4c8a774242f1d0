//! The dashboard: a small client app (plain HTML, ES modules and CSS under the repo's
//! `dashboard/` folder) embedded in the binary and served by the control plane.
//!
//! `GET /assets/<file>` answers one embedded file; any other GET outside `/api` answers
//! `index.html`, whose script routes on the path (history API), so a reload or a
//! bookmarked `/budgets` lands on the right page. The app reads and writes through
//! the public JSON API only, with the session cookie, so what it shows is what the
//! API says. Every answer carries a strict Content-Security-Policy: scripts, styles
//! and requests only from this origin, no inline script.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};

use spendgate_engine::error::{ApiError, ErrorCode};

/// One embedded file: its path under `/assets/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../dashboard/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of `dashboard/` the app loads (a test checks none is missing).
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("lib/api.js", JS),
    asset!("lib/budget.js", JS),
    asset!("lib/chart.js", JS),
    asset!("lib/dom.js", JS),
    asset!("lib/money.js", JS),
    asset!("lib/names.js", JS),
    asset!("lib/recent-calls.js", JS),
    asset!("lib/snippets.js", JS),
    asset!("lib/spend-chart.js", JS),
    asset!("lib/tripped.js", JS),
    asset!("pages/actions.js", JS),
    asset!("pages/audit.js", JS),
    asset!("pages/budgets.js", JS),
    asset!("pages/cost-events.js", JS),
    asset!("pages/customers.js", JS),
    asset!("pages/first-run.js", JS),
    asset!("pages/key.js", JS),
    asset!("pages/keys.js", JS),
    asset!("pages/margins.js", JS),
    asset!("pages/organization.js", JS),
    asset!("pages/provider-keys.js", JS),
    asset!("pages/overview.js", JS),
    asset!("pages/pricing.js", JS),
    asset!("pages/signin.js", JS),
    asset!("pages/webhooks.js", JS),
];

/// Only this origin's scripts, styles, images and API; no framing, no plugins.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// A strong validator of the file's bytes: file names carry no content hash, so
/// browsers revalidate (`no-cache`) and get a 304 while the binary is unchanged.
fn etag(asset: &Asset) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(asset.body))[..20])
}

/// Each file's [`etag`], computed once.
static ETAGS: std::sync::LazyLock<Vec<(&'static str, String)>> =
    std::sync::LazyLock::new(|| ASSETS.iter().map(|a| (a.path, etag(a))).collect());

fn serve(req: &HttpRequest, asset: &'static Asset) -> HttpResponse {
    let tag =
        ETAGS.iter().find(|(path, _)| *path == asset.path).map_or_else(|| etag(asset), |(_, t)| t.clone());
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut res = if fresh { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    res.insert_header((header::ETAG, tag))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .insert_header((header::REFERRER_POLICY, HeaderValue::from_static("same-origin")))
        .insert_header((header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")));
    if fresh {
        return res.finish();
    }
    res.content_type(asset.content_type).body(asset.body)
}

/// `GET /assets/{file}`: one embedded file, or the JSON 404.
async fn get_asset(req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    find(&path).map(|a| serve(&req, a)).ok_or_else(|| ApiError::new(ErrorCode::NotFound, "No such asset"))
}

/// Any other request outside `/api`: the app's page for GET and HEAD (the script
/// picks the page from the path), the JSON 404 for anything else.
async fn get_page(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let page = find("index.html").filter(|_| matches!(*req.method(), Method::GET | Method::HEAD));
    page.map(|a| serve(&req, a)).ok_or_else(|| ApiError::new(ErrorCode::NotFound, "No such endpoint"))
}

/// Registers the assets and the page fallback; call after `api::configure` (the
/// `/api` scope keeps its own JSON 404, so no dashboard page shadows an endpoint).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/assets/{file:.+}", web::get().to(get_asset)).default_service(web::to(get_page));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_folder_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dashboard");
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
                if rel.ends_with(".md") {
                    continue;
                }
                assert!(find(&rel).is_some(), "dashboard/{rel} is not in ASSETS");
            }
        }
    }

    #[test]
    fn etag_is_stable_and_quoted() {
        let a = find("app.js").unwrap();
        assert_eq!(etag(a), etag(a));
        assert!(etag(a).starts_with('"') && etag(a).ends_with('"'));
    }
}
