//! The OpenAPI 3.1 document (`GET /api/openapi.json`), generated from the handlers'
//! annotations. Each endpoint module contributes its own `ApiDoc`; `complete` then
//! adds what every operation shares, derived from the document itself so it cannot
//! drift: the error envelope on every error response, and the errors the shared
//! extractors answer (JSON body: 400/413/415; API key: 401/429; session: 401/403;
//! the database: 503). The proxy's operations are declared under the proxy's own
//! server (a path-level `servers`) at this instance's proxy address, the rest under
//! the control plane's.

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::{Server, ServerBuilder, ServerVariableBuilder};
use utoipa::openapi::{Content, RefOr, Response};
use utoipa::{Modify, OpenApi};

use spendgate_engine::openapi::{
    ErrorBody, ErrorEnvelope, CRON_SECRET, INTERNAL_SECRET, SERVICE_KEY, SESSION,
};
use spendgate_engine::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(title = "spendgate", description = "Spend-governance gateway for AI agents: control plane and proxy. \
        Paths under /api are served by the control-plane listener; all other paths by the proxy listener."),
    servers((url = "/", description = "the control-plane listener (control_addr) of this instance")),
    components(schemas(ErrorEnvelope, ErrorBody)),
    modifiers(&SecuritySchemes)
)]
struct Root;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else { return };
        let header = |name: &str, what: &str| {
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(name, what)))
        };
        components.add_security_scheme(SERVICE_KEY, header("X-Service-Key", "API key (`svc_live_sk_…`)"));
        // Provider routes only, when X-Service-Key is absent: the spendgate key where
        // the format's clients put their provider key; the call then goes out with the
        // organization's stored provider credential (400 invalid_upstream when none).
        let in_slot =
            "API key (`svc_live_sk_…`) where the provider's SDK puts its own key, when X-Service-Key \
            is absent; the call is forwarded with the organization's stored provider credential";
        components.add_security_scheme(
            "serviceKeyBearer",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(in_slot)).build(),
            ),
        );
        components.add_security_scheme("serviceKeyAnthropic", header("x-api-key", in_slot));
        components.add_security_scheme("serviceKeyGoogle", header("x-goog-api-key", in_slot));
        components.add_security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::session::COOKIE_NAME,
                "Dashboard session (POST /api/auth/login). Writes must be same-origin.",
            ))),
        );
        components.add_security_scheme(
            INTERNAL_SECRET,
            header("X-Internal-Secret", "Shared secret of the proxy's internal routes"),
        );
        components.add_security_scheme(
            CRON_SECRET,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("Scheduler secret (`cron_secret`)"))
                    .build(),
            ),
        );
    }
}

/// The document as this instance serves it, written once: the proxy's operations name
/// its proxy as agents reach it ([`AppState::proxy_public_url`], as the dashboard's
/// snippets do). Called once the proxy is bound, so an ephemeral port is the real one.
pub fn served(state: &AppState) -> serde_json::Result<crate::api::openapi::Document> {
    let proxy_url = state.proxy_public_url();
    let any_host_port = (state.config.proxy_public_url.is_none() && state.proxy_addr().ip().is_unspecified())
        .then(|| state.proxy_addr().port());
    crate::api::openapi::Document::new(&document(&proxy_url), &proxy_url, any_host_port)
}

/// The merged document of every module, with the proxy at `proxy_url`.
pub fn document(proxy_url: &str) -> utoipa::openapi::OpenApi {
    let mut doc = Root::openapi();
    for part in [
        crate::api::openapi::ApiDoc::openapi(),
        crate::api::health::ApiDoc::openapi(),
        crate::api::auth::ApiDoc::openapi(),
        crate::api::orgs::ApiDoc::openapi(),
        crate::api::keys::ApiDoc::openapi(),
        crate::api::provider_credentials::ApiDoc::openapi(),
        crate::api::mcp_servers::ApiDoc::openapi(),
        crate::api::model_prices::ApiDoc::openapi(),
        crate::api::audit::ApiDoc::openapi(),
        crate::api::actions::ApiDoc::openapi(),
        crate::api::budgets::ApiDoc::openapi(),
        crate::api::cost_events::ApiDoc::openapi(),
        crate::api::cost_events_daily::ApiDoc::openapi(),
        crate::api::cost_events_ingest::ApiDoc::openapi(),
        crate::api::policy::ApiDoc::openapi(),
        crate::api::tool_costs::ApiDoc::openapi(),
        crate::api::customer_bindings::ApiDoc::openapi(),
        crate::api::payprocessor::ApiDoc::openapi(),
        crate::api::customer_mappings::ApiDoc::openapi(),
        crate::api::margins::ApiDoc::openapi(),
        crate::api::webhooks::ApiDoc::openapi(),
    ] {
        doc.merge(part);
    }
    for mut part in [crate::proxy::openapi::document(), crate::proxy::customers_doc_api()] {
        for item in part.paths.paths.values_mut() {
            item.servers = Some(vec![proxy_server(proxy_url)]);
        }
        doc.merge(part);
    }
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    for item in doc.paths.paths.values_mut() {
        for op in [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete]
            .into_iter()
            .flatten()
        {
            complete(op);
        }
    }
    doc
}

/// The proxy listener, which serves every operation outside `/api`: a server variable
/// whose default is this instance's proxy (`proxy_url`), so a client generated for
/// another deployment can name its own.
fn proxy_server(proxy_url: &str) -> Server {
    ServerBuilder::new()
        .url("{proxyUrl}")
        .description(Some("the proxy listener (proxy_addr) of this instance"))
        .parameter(
            "proxyUrl",
            ServerVariableBuilder::new()
                .default_value(proxy_url)
                .description(Some("the proxy's base URL (proxy_public_url, else the address it listens on)")),
        )
        .build()
}

/// The errors an operation answers because of how it is reached, and the envelope
/// on every error response that does not describe its own body.
fn complete(op: &mut Operation) {
    let schemes: Vec<String> = op
        .security
        .iter()
        .flatten()
        .filter_map(|req| serde_json::to_value(req).ok())
        .filter_map(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .flatten()
        .collect();
    let has = |name: &str| schemes.iter().any(|s| s == name);
    let json_body = op.request_body.as_ref().is_some_and(|b| b.content.contains_key("application/json"));
    // A range (`4XX`) an operation documents itself (the provider's own errors pass
    // through the proxy) covers its statuses.
    let ranges: Vec<char> = op
        .responses
        .responses
        .keys()
        .filter(|s| s.ends_with("XX"))
        .filter_map(|s| s.chars().next())
        .collect();
    let mut add = |status: &str, what: &str| {
        if status.chars().next().is_some_and(|c| ranges.contains(&c)) {
            return;
        }
        op.responses.responses.entry(status.to_owned()).or_insert_with(|| RefOr::T(Response::new(what)));
    };
    if json_body {
        add("400", "validation_error or invalid_json");
        add("413", "payload_too_large: body over 1,048,576 bytes");
        add("415", "unsupported_media_type: Content-Type is not application/json");
    }
    if has(SERVICE_KEY) {
        add("401", "authentication_required (control plane) or unauthorized (proxy): missing or invalid key");
        add("429", "rate_limit_exceeded; Retry-After: 60");
    }
    if has(SESSION) {
        add("401", "authentication_required: no valid session");
        add("403", "forbidden: role too low, or a cross-origin write");
    }
    if has(INTERNAL_SECRET) {
        add("401", "unauthorized: missing or wrong internal secret");
        add("404", "not_found: the instance has no internal secret configured");
    }
    if !schemes.is_empty() {
        add("503", "service_unavailable: the database could not answer; Retry-After: 1");
    }
    for (status, response) in op.responses.responses.iter_mut() {
        let is_error = status.starts_with('4') || status.starts_with('5');
        if let (true, RefOr::T(response)) = (is_error, response) {
            if response.content.is_empty() {
                response.content.insert(
                    "application/json".to_owned(),
                    Content::new(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("ErrorEnvelope")))),
                );
            }
        }
    }
}
