//! Talking to the providers: one pooled HTTPS client per worker thread, the upstream
//! allow-list and the operator's named upstreams (where a call goes: [`Target`]),
//! upstream URLs, and which headers cross the proxy in each direction.

use std::cell::RefCell;
use std::time::Duration;

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

use super::credential::{is_spendgate_key, Credential};
use super::usage::WireFormat;
use spendgate_engine::config::Config;
use spendgate_engine::pricing::Provider;
use spendgate_engine::upstreams::NamedUpstream;

/// The provider routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ChatCompletions,
    /// `POST /v1/responses`, the OpenAI Responses API.
    Responses,
    /// `POST /v1/embeddings`.
    Embeddings,
    Messages,
    GenerateContent,
    StreamGenerateContent,
}

impl Route {
    pub const fn provider(self) -> Provider {
        match self {
            Route::ChatCompletions | Route::Responses | Route::Embeddings => Provider::OpenAi,
            Route::Messages => Provider::Anthropic,
            Route::GenerateContent | Route::StreamGenerateContent => Provider::Google,
        }
    }

    /// How the route's requests and answers are read.
    pub const fn format(self) -> WireFormat {
        match self {
            Route::Responses => WireFormat::OpenAiResponses,
            Route::Embeddings => WireFormat::OpenAiEmbeddings,
            other => WireFormat::of(other.provider()),
        }
    }
}

/// OpenAI-compatible providers accepted in `X-Service-Upstream` besides the two
/// defaults (`https://api.openai.com`, `https://api.anthropic.com`). Entries carry no
/// version segment; the proxy appends the route's path (`/v1/chat/completions`).
pub const EXTRA_UPSTREAMS: [&str; 5] = [
    "https://api.groq.com/openai",
    "https://api.together.xyz",
    "https://api.fireworks.ai/inference",
    "https://api.mistral.ai",
    "https://api.deepseek.com",
];

pub const DEFAULT_OPENAI: &str = "https://api.openai.com";
pub const DEFAULT_ANTHROPIC: &str = "https://api.anthropic.com";
pub const DEFAULT_GEMINI: &str = "https://generativelanguage.googleapis.com";

/// An `X-Service-Upstream` that is not on the allow-list (400 `invalid_upstream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAllowed;

/// Where one call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The upstream's name, which a stored provider credential is looked up by:
    /// `openai`, `anthropic`, `gemini` (the configured built-in bases) or an
    /// operator-defined name. `None` for an allow-listed OpenAI-compatible provider
    /// (Groq, Together, ...) that is none of them: no stored credential goes there.
    pub name: Option<String>,
    /// Base URL, no trailing slash; the route's path is appended.
    pub base: String,
    /// The cost event's `provider`: `openai`, `anthropic`, `google` on the built-in
    /// upstreams, the name of an operator-defined one (its prices are keyed on it).
    pub provider: String,
    /// Set for an operator-defined upstream.
    pub named: bool,
    /// The header the provider key goes in, when not the format's own.
    pub key_header: Option<String>,
}

/// Why no target could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// `/upstreams/{name}/...` names no configured upstream of the route's format.
    UnknownName,
    /// `X-Service-Upstream` is neither allow-listed for the route nor a configured
    /// upstream of its format.
    NotAllowed,
}

impl Target {
    fn builtin(config: &Config, route: Route) -> Target {
        let (name, base) = match route.provider() {
            Provider::OpenAi => ("openai", config.upstream_openai.as_str()),
            Provider::Anthropic => ("anthropic", config.upstream_anthropic.as_str()),
            Provider::Google => ("gemini", config.upstream_gemini.as_str()),
        };
        Target {
            name: Some(name.to_owned()),
            base: base.trim_end_matches('/').to_owned(),
            provider: route.provider().as_str().to_owned(),
            named: false,
            key_header: None,
        }
    }

    fn named(upstream: &NamedUpstream) -> Target {
        Target {
            name: Some(upstream.name.clone()),
            base: upstream.base_url.clone(),
            provider: upstream.name.clone(),
            named: true,
            key_header: upstream.key_header.clone(),
        }
    }
}

/// The target of a call on `route`: the operator-defined upstream named in the path
/// (`/upstreams/{name}/...`) or whose base URL is in `X-Service-Upstream`, else an
/// allow-listed `X-Service-Upstream` (OpenAI-compatible route only), else the route's
/// configured base. A named upstream answers only the routes of its wire format.
pub fn target(
    config: &Config,
    route: Route,
    path_name: Option<&str>,
    requested: Option<&str>,
) -> Result<Target, TargetError> {
    let format = route.provider();
    let wanted = requested.map(|r| r.trim_end_matches('/'));
    if let Some(name) = path_name {
        let upstream =
            config.upstream(name).filter(|u| u.format == format).ok_or(TargetError::UnknownName)?;
        // A header beside the path prefix may only repeat it.
        return match wanted {
            Some(w) if w != upstream.base_url => Err(TargetError::NotAllowed),
            _ => Ok(Target::named(upstream)),
        };
    }
    let Some(wanted) = wanted else { return Ok(Target::builtin(config, route)) };
    if let Some(upstream) = config.upstreams.iter().find(|u| u.base_url == wanted && u.format == format) {
        return Ok(Target::named(upstream));
    }
    if format != Provider::OpenAi {
        // An Anthropic or Gemini request carries that provider's key, which must never
        // reach another provider the operator did not name.
        return Err(TargetError::NotAllowed);
    }
    let base = base_url(config, route, Some(wanted)).map_err(|NotAllowed| TargetError::NotAllowed)?;
    let mut target = Target::builtin(config, route);
    if base != target.base {
        target.name = None;
        target.base = base.to_owned();
    }
    Ok(target)
}

/// The base URL the route goes to: the allow-listed override, else the configured one.
pub fn base_url<'a>(
    config: &'a Config,
    route: Route,
    requested: Option<&'a str>,
) -> Result<&'a str, NotAllowed> {
    let configured = match route.provider() {
        Provider::OpenAi => config.upstream_openai.as_str(),
        Provider::Anthropic => config.upstream_anthropic.as_str(),
        Provider::Google => config.upstream_gemini.as_str(),
    };
    let Some(requested) = requested else { return Ok(configured.trim_end_matches('/')) };
    let wanted = requested.trim_end_matches('/');
    let allowed = [DEFAULT_OPENAI, DEFAULT_ANTHROPIC]
        .into_iter()
        .chain(EXTRA_UPSTREAMS)
        // The configured bases count as the defaults they replace.
        .chain([config.upstream_openai.as_str(), config.upstream_anthropic.as_str()])
        .any(|a| a.trim_end_matches('/') == wanted);
    if allowed {
        Ok(wanted)
    } else {
        Err(NotAllowed)
    }
}

/// The upstream URL: base + the route's own path (+ query; `alt=sse` on the Gemini
/// streaming route).
pub fn url(base: &str, route: Route, model: &str, query: &str) -> String {
    match route {
        Route::ChatCompletions => join_query(format!("{base}/v1/chat/completions"), query),
        Route::Responses => join_query(format!("{base}/v1/responses"), query),
        Route::Embeddings => join_query(format!("{base}/v1/embeddings"), query),
        Route::Messages => join_query(format!("{base}/v1/messages"), query),
        Route::GenerateContent => join_query(format!("{base}/v1beta/models/{model}:generateContent"), query),
        Route::StreamGenerateContent => {
            let has_alt = query.split('&').any(|p| p.starts_with("alt="));
            let url = join_query(format!("{base}/v1beta/models/{model}:streamGenerateContent"), query);
            if has_alt {
                url
            } else if query.is_empty() {
                format!("{url}?alt=sse")
            } else {
                format!("{url}&alt=sse")
            }
        }
    }
}

fn join_query(url: String, query: &str) -> String {
    if query.is_empty() {
        url
    } else {
        format!("{url}?{query}")
    }
}

/// The headers forwarded upstream for `route`, exactly as the spec lists them, with
/// the provider key of `credential` (the client's own key headers, never a spendgate
/// key; or the stored one). `traceparent` is forwarded (with `tracestate`) only when
/// it was valid. An upstream whose key goes in another header (`key_header`) gets the
/// key there alone (see [`move_key`]).
pub fn forwarded_headers(
    route: Route,
    inbound: &HeaderMap,
    traceparent: Option<&str>,
    credential: &Credential,
    key_header: Option<&str>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = standard_headers(route, inbound, traceparent, credential);
    if let Some(h) = key_header {
        // A client that already sends its key in the upstream's own header.
        let own =
            inbound.get(h).filter(|v| matches!(credential, Credential::Client) && !is_spendgate_key(h, v));
        if let (Some(v), Ok(name)) = (own, HeaderName::from_bytes(h.as_bytes())) {
            out.push((name, v.clone()));
        }
        move_key(&mut out, h);
    }
    out
}

/// The provider key among the forwarded headers (the client's own or the stored one)
/// moved into `key_header`: the key is sent in `key_header` alone (as a bearer token
/// when that is `authorization`).
fn move_key(out: &mut Vec<(HeaderName, HeaderValue)>, key_header: &str) {
    let Ok(name) = HeaderName::from_bytes(key_header.as_bytes()) else { return };
    let is_key =
        |n: &HeaderName| matches!(n.as_str(), "authorization" | "x-api-key" | "x-goog-api-key") || *n == name;
    let key = out.iter().find(|(n, _)| *n == name).or_else(|| out.iter().find(|(n, _)| is_key(n))).and_then(
        |(n, v)| {
            let v = v.to_str().ok()?;
            Some(if n == "authorization" { strip_bearer(v)?.to_owned() } else { v.to_owned() })
        },
    );
    out.retain(|(n, _)| !is_key(n));
    let value = match key {
        Some(k) if name == "authorization" => HeaderValue::from_str(&format!("Bearer {k}")),
        Some(k) => HeaderValue::from_str(&k),
        None => return,
    };
    if let Ok(value) = value {
        out.push((name, value));
    }
}

/// The token of a `Bearer <token>` header value.
fn strip_bearer(value: &str) -> Option<&str> {
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).map(str::trim)
}

fn standard_headers(
    route: Route,
    inbound: &HeaderMap,
    traceparent: Option<&str>,
    credential: &Credential,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(6);
    let client_keys = matches!(credential, Credential::Client);
    // `key`: a provider key header, passed only as the client's own key, and never
    // when it holds a spendgate key.
    let mut copy = |name: &'static str, key: bool| {
        let value = inbound.get(name).filter(|v| !key || (client_keys && !is_spendgate_key(name, v)));
        if let Some(v) = value {
            out.push((HeaderName::from_static(name), v.clone()));
        }
    };
    match route.provider() {
        Provider::OpenAi => {
            copy("authorization", true);
            copy("openai-organization", false);
            copy("openai-project", false);
        }
        Provider::Anthropic => {
            copy("x-api-key", true);
            copy("authorization", true);
            copy("anthropic-beta", false);
            let version = inbound
                .get("anthropic-version")
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("2023-06-01"));
            out.push((HeaderName::from_static("anthropic-version"), version));
        }
        Provider::Google => {
            // The Google-style key: the native header, else `Authorization: Bearer <key>`.
            let native =
                inbound.get("x-goog-api-key").filter(|v| !is_spendgate_key("x-goog-api-key", v)).cloned();
            let bearer = inbound
                .get("authorization")
                .filter(|v| !is_spendgate_key("authorization", v))
                .and_then(|v| v.to_str().ok())
                .and_then(strip_bearer)
                .and_then(|k| HeaderValue::from_str(k).ok());
            if let Some(key) = native.or(bearer).filter(|_| client_keys) {
                out.push((HeaderName::from_static("x-goog-api-key"), key));
            }
        }
    }
    if let Credential::Stored(name, value) = credential {
        out.push((name.clone(), value.clone()));
    }
    if let Some(tp) = traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
        out.push((HeaderName::from_static("traceparent"), tp));
        if let Some(ts) = inbound.get("tracestate") {
            out.push((HeaderName::from_static("tracestate"), ts.clone()));
        }
    }
    out
}

/// Whether an upstream response header is passed back to the client: the request id,
/// every rate-limit header, `retry-after`, and the content type.
pub fn passes_back(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "content-type"
        || n == "x-request-id"
        || n == "request-id"
        || n == "retry-after"
        || n.starts_with("x-ratelimit-")
        || n.starts_with("anthropic-ratelimit-")
}

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

/// This worker's pooled client (keep-alive connections are reused per worker), with
/// the operator's trust store and proxy settings (`spendgate_engine::net`).
pub fn client(config: &Config) -> awc::Client {
    CLIENT.with(|c| c.borrow_mut().get_or_insert_with(|| build_client(config)).clone())
}

fn build_client(config: &Config) -> awc::Client {
    // No client-wide timeout: awc would apply it to the whole response body too, and a
    // stream may rightly last longer. The proxy times the head and each chunk itself.
    let mut options = spendgate_engine::net::Options::new(config.upstream_connect_timeout);
    options.keep_alive = Duration::from_secs(90);
    spendgate_engine::net::client(&options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_stream_gets_alt_sse() {
        assert_eq!(
            url("http://m", Route::StreamGenerateContent, "gemini-2.5-pro", ""),
            "http://m/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            url("http://m", Route::StreamGenerateContent, "g", "key=k"),
            "http://m/v1beta/models/g:streamGenerateContent?key=k&alt=sse"
        );
        assert_eq!(url("http://m", Route::ChatCompletions, "", ""), "http://m/v1/chat/completions");
    }

    #[test]
    fn anthropic_version_defaults_and_gemini_key_moves() {
        let inbound = HeaderMap::new();
        let h = forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, None);
        assert_eq!(
            h,
            vec![(HeaderName::from_static("anthropic-version"), HeaderValue::from_static("2023-06-01"))]
        );
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer g-key"));
        inbound.insert(HeaderName::from_static("x-service-key"), HeaderValue::from_static("secret"));
        let h = forwarded_headers(Route::GenerateContent, &inbound, None, &Credential::Client, None);
        assert_eq!(h, vec![(HeaderName::from_static("x-goog-api-key"), HeaderValue::from_static("g-key"))]);
    }

    #[test]
    fn stored_credential_replaces_client_keys_and_spendgate_keys_never_leave() {
        let svc = HeaderValue::from_static("Bearer svc_live_sk_0123456789abcdef0123456789abcdef");
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), svc.clone());
        inbound.insert(HeaderName::from_static("x-api-key"), HeaderValue::from_static("sk-ant-own"));
        let h = forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, None);
        assert!(h.iter().all(|(_, v)| v != svc), "{h:?}");
        assert!(h.iter().any(|(n, v)| n == "x-api-key" && v == "sk-ant-own"));
        let stored = Credential::Stored(
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("sk-ant-stored"),
        );
        let h = forwarded_headers(Route::Messages, &inbound, None, &stored, None);
        let keys: Vec<_> = h.iter().filter(|(n, _)| n == "x-api-key" || n == "authorization").collect();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].1, "sk-ant-stored");
        let h = forwarded_headers(Route::ChatCompletions, &inbound, None, &Credential::Absent, None);
        assert!(h.iter().all(|(n, _)| n != "authorization"));
    }

    #[test]
    fn a_key_header_gets_the_bearer_key_alone() {
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer az-key"));
        let h =
            forwarded_headers(Route::ChatCompletions, &inbound, None, &Credential::Client, Some("api-key"));
        assert_eq!(h, vec![(HeaderName::from_static("api-key"), HeaderValue::from_static("az-key"))]);
        let mut inbound = HeaderMap::new();
        inbound.insert(HeaderName::from_static("x-api-key"), HeaderValue::from_static("k"));
        let h =
            forwarded_headers(Route::Messages, &inbound, None, &Credential::Client, Some("authorization"));
        assert!(h.contains(&(HeaderName::from_static("authorization"), HeaderValue::from_static("Bearer k"))));
        assert!(!h.iter().any(|(n, _)| n == "x-api-key"), "{h:?}");
    }
}
