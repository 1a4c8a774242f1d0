//! The proxy's part of the OpenAPI document: the provider pass-through routes and
//! the MCP routes, whose handlers (`route.rs`, `mcp.rs`) carry no annotations of
//! their own, plus the health, internal and policy routes annotated in place.

#![allow(dead_code, reason = "the functions and fields exist for the OpenAPI document only")]

use std::collections::BTreeMap;

use utoipa::ToSchema;

use crate::openapi::shared::Data;

/// A provider request or response in the provider's native format, passed through
/// unmodified.
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub struct ProviderBody(serde_json::Value);

/// The request headers the provider routes read (spec: Request headers (proxy)).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct ProxyHeaders {
    /// JSON object of tags; invalid JSON is ignored, invalid entries dropped.
    #[param(rename = "X-Service-Tags")]
    tags: Option<String>,
    /// Session id, max 256 characters (longer: 400); echoed on the response.
    #[param(rename = "X-Service-Session")]
    session: Option<String>,
    /// `1`: finalize within the budget's reserve zone.
    #[param(rename = "X-Service-Finalize")]
    finalize: Option<String>,
    /// End customer, 1-256 of `[a-zA-Z0-9._:-]`; invalid: ignored with `X-Service-Warning: invalid_customer`.
    #[param(rename = "X-Service-Customer")]
    customer: Option<String>,
    /// 32 lowercase hex; invalid is replaced.
    #[param(rename = "X-Service-Trace-Id")]
    trace_id: Option<String>,
    /// `svc_act_<uuid>`.
    #[param(rename = "X-Service-Action-Id")]
    action_id: Option<String>,
    /// UUID or ULID, max 64 characters; invalid is replaced; echoed on the response.
    #[param(rename = "X-Service-Request-Id")]
    request_id: Option<String>,
    /// Upstream base URL: on the allow-list (chat completions only), or the base URL of
    /// an operator-defined upstream of the route's format (else 400 invalid_upstream).
    #[param(rename = "X-Service-Upstream")]
    upstream: Option<String>,
    /// W3C trace context; takes priority over X-Service-Trace-Id.
    traceparent: Option<String>,
}

/// `POST /v1/mcp/budget/check`: may a tool call of this estimated cost run?
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct McpCheckInput {
    /// 0 to 10^12. Absent: the configured cost of `toolServer`/`toolName` (0 for a
    /// tool never discovered); then both of those are required.
    estimate_microdollars: Option<i64>,
    tool_name: Option<String>,
    tool_server: Option<String>,
    /// 1-200 characters.
    session_id: Option<String>,
    /// `[a-zA-Z0-9._:-]`, 1-256 characters; defaults to `tags.customer`.
    customer: Option<String>,
    tags: Option<BTreeMap<String, String>>,
}

/// The answer of the budget check: a denial is `allowed: false`, not an error.
#[derive(ToSchema)]
pub struct McpCheckResult {
    allowed: bool,
    /// The denial's code (`budget_exceeded`, ...); null when allowed.
    code: Option<String>,
    message: Option<String>,
    /// The tightest matching budget; null when none matches.
    budget: Option<McpBudget>,
}

#[derive(ToSchema)]
pub struct McpBudget {
    entity_type: String,
    entity_id: String,
    limit_microdollars: i64,
    spent_microdollars: i64,
    remaining_microdollars: i64,
}

/// `POST /v1/mcp/events`: the cost of one tool-protocol call.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct McpEventInput {
    tool_name: String,
    tool_server: String,
    /// 0 to 10^12. Absent: the tool's configured cost (`/api/tool-costs`), or 0 and
    /// tag `_svc_unpriced_tool` for a tool never discovered.
    cost_microdollars: Option<i64>,
    duration_ms: Option<i64>,
    session_id: Option<String>,
    /// 32 lowercase hex.
    trace_id: Option<String>,
    /// Correlation only: every event is a tool call and is charged, a repeated
    /// `requestId` included.
    request_id: Option<String>,
    customer: Option<String>,
    tags: Option<BTreeMap<String, String>>,
}

#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct McpRecorded {
    /// `svc_evt_<uuid>`.
    id: String,
    created_at: String,
    /// `approved` or `skipped`.
    budget_status: String,
}

/// Chat completions (OpenAI format), streaming (`stream: true`, SSE) or not.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "proxy", security(("serviceKey" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (validation_error, invalid_json, invalid_upstream, \
            unauthorized, forbidden, mandate_violation, customer_not_allowed, payload_too_large, \
            unsupported_media_type, rate_limit_exceeded and the enforcement codes with X-Service-Denied: 1), \
            or the provider's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn chat_completions() {}

/// Messages (Anthropic format), streaming or not.
#[utoipa::path(post, path = "/v1/messages", tag = "proxy", security(("serviceKey" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn messages() {}

/// Gemini `generateContent`. Registered as `/v1beta/models/{tail}`; other actions
/// than the two documented ones answer 404.
#[utoipa::path(post, path = "/v1beta/models/{model}:generateContent", tag = "proxy", security(("serviceKey" = [])),
    params(("model" = String, Path, description = "Model name of A-Z a-z 0-9 . _ - (else 400 validation_error); dated aliases price as the base model"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn gemini_generate() {}

/// Gemini `streamGenerateContent` (the proxy asks upstream for `alt=sse`).
#[utoipa::path(post, path = "/v1beta/models/{model}:streamGenerateContent", tag = "proxy",
    security(("serviceKey" = [])),
    params(("model" = String, Path, description = "Model name"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = String),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn gemini_stream() {}

/// Chat completions at an operator-defined upstream of the `openai` format; every
/// rule of `/v1/chat/completions` applies, and the cost event's provider is the
/// upstream's name.
#[utoipa::path(post, path = "/upstreams/{upstream}/v1/chat/completions", tag = "proxy",
    security(("serviceKey" = [])),
    params(("upstream" = String, Path, description = "A configured upstream's name"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (not_found: no configured upstream of that \
            name speaks this format), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502), upstream_timeout (504), service_unavailable (503), \
            or the provider's own server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn upstream_chat_completions() {}

/// Messages at an operator-defined upstream of the `anthropic` format.
#[utoipa::path(post, path = "/upstreams/{upstream}/v1/messages", tag = "proxy", security(("serviceKey" = [])),
    params(("upstream" = String, Path, description = "A configured upstream's name"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (not_found: no configured upstream of that \
            name speaks this format), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502), upstream_timeout (504), service_unavailable (503), \
            or the provider's own server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn upstream_messages() {}

/// `generateContent` at an operator-defined upstream of the `gemini` format.
#[utoipa::path(post, path = "/upstreams/{upstream}/v1beta/models/{model}:generateContent", tag = "proxy",
    security(("serviceKey" = [])),
    params(("upstream" = String, Path, description = "A configured upstream's name"),
        ("model" = String, Path, description = "Model name, of A-Z a-z 0-9 . _ -"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502), upstream_timeout (504), service_unavailable (503), \
            or the provider's own server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn upstream_gemini_generate() {}

/// `streamGenerateContent` at an operator-defined upstream of the `gemini` format.
#[utoipa::path(post, path = "/upstreams/{upstream}/v1beta/models/{model}:streamGenerateContent", tag = "proxy",
    security(("serviceKey" = [])),
    params(("upstream" = String, Path, description = "A configured upstream's name"),
        ("model" = String, Path, description = "Model name, of A-Z a-z 0-9 . _ -"), ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = String),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502), upstream_timeout (504), service_unavailable (503), \
            or the provider's own server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn upstream_gemini_stream() {}

/// Pre-call budget check of a tool call; reserves nothing.
#[utoipa::path(post, path = "/v1/mcp/budget/check", tag = "proxy", security(("serviceKey" = [])),
    request_body = McpCheckInput,
    responses((status = 200, description = "Allowed or denied", body = McpCheckResult)))]
fn mcp_budget_check() {}

/// Records the cost of a tool call; budget enforcement applies (429 with
/// X-Service-Denied: 1 when a budget is exhausted).
#[utoipa::path(post, path = "/v1/mcp/events", tag = "proxy", security(("serviceKey" = [])),
    request_body = McpEventInput,
    responses((status = 201, description = "Recorded", body = Data<McpRecorded>),
        (status = 403, description = "forbidden or customer_not_allowed"),
        (status = 429, description = "rate_limit_exceeded or a budget enforcement code, with X-Service-Denied: 1")))]
fn mcp_events() {}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    chat_completions,
    messages,
    gemini_generate,
    gemini_stream,
    upstream_chat_completions,
    upstream_messages,
    upstream_gemini_generate,
    upstream_gemini_stream,
    mcp_budget_check,
    mcp_events,
    super::health::get_health,
    super::health::get_ready,
    super::health::get_metrics,
    super::health::get_feature_flags,
    super::internal::invalidate_budget,
    super::internal::get_velocity_state,
    super::policy::get_policy
))]
pub struct ApiDoc;
