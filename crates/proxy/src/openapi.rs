//! The proxy's part of the OpenAPI document: the provider pass-through routes and
//! the MCP routes, whose handlers (`route.rs`, `mcp.rs`) carry no annotations of
//! their own, plus the health, internal and policy routes annotated in place.

#![allow(dead_code, reason = "the functions and fields exist for the OpenAPI document only")]

use std::collections::BTreeMap;

use utoipa::ToSchema;

use spendgate_engine::openapi::Data;

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
    /// Upstream base URL: on the allow-list (OpenAI routes only), or the base URL of an
    /// operator-defined upstream of the route's format (else 400 invalid_upstream).
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
#[utoipa::path(post, path = "/v1/chat/completions", tag = "proxy",
    security(("serviceKey" = []), ("serviceKeyBearer" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming); \
            `X-Service-Clamped-Output-Tokens: N` when an exactCeiling budget cut the output bound to N",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (validation_error, invalid_json, invalid_upstream, \
            unauthorized, forbidden (also: the key requires stored provider credentials and the call brought \
            its own), mandate_violation, customer_not_allowed, payload_too_large, \
            unsupported_media_type, rate_limit_exceeded, model_not_priced (no price for the model and the \
            organization's unpricedModels is block), invalid_input when a budget with exactCeiling cannot \
            bound the call (non-text parts, provider-run tools, a thinking budget above the clamped bound), \
            and the enforcement codes with X-Service-Denied: 1), \
            or the provider's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn chat_completions() {}

/// Messages (Anthropic format), streaming or not.
#[utoipa::path(post, path = "/v1/messages", tag = "proxy",
    security(("serviceKey" = []), ("serviceKeyAnthropic" = []), ("serviceKeyBearer" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming); \
            `X-Service-Clamped-Output-Tokens: N` when an exactCeiling budget cut the output bound to N",
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
#[utoipa::path(post, path = "/v1beta/models/{model}:generateContent", tag = "proxy",
    security(("serviceKey" = []), ("serviceKeyGoogle" = []), ("serviceKeyBearer" = [])),
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
    security(("serviceKey" = []), ("serviceKeyGoogle" = []), ("serviceKeyBearer" = [])),
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

/// Responses (OpenAI Responses API), streaming (`stream: true`, typed SSE events) or
/// not. Charged from the answer's `usage` (a stream's `response.completed`,
/// `response.incomplete`, or `response.failed` with usage); built-in tool calls are
/// charged per call on top; `background: true` is charged its estimate.
#[utoipa::path(post, path = "/v1/responses", tag = "proxy", security(("serviceKey" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` when streaming); \
            `X-Service-Clamped-Output-Tokens: N` when an exactCeiling budget cut the output bound to N",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (as on /v1/chat/completions), \
            or the provider's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json"))),
    ))]
fn create_response() {}

/// Embeddings (OpenAI format), charged from `usage.prompt_tokens`.
#[utoipa::path(post, path = "/v1/embeddings", tag = "proxy", security(("serviceKey" = [])),
    params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses(
        (status = 200, description = "The provider's answer", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope, or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or the provider's \
            own server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn create_embeddings() {}

/// Retrieves a stored response; passed through with the key's authentication, not charged.
#[utoipa::path(get, path = "/v1/responses/{response_id}", tag = "proxy", security(("serviceKey" = [])),
    params(("response_id" = String, Path, description = "The provider's response id")),
    responses((status = 200, description = "The provider's answer, passed through", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (unauthorized, validation_error for an \
            odd response id, forbidden, invalid_upstream, not_found), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json")))))]
fn retrieve_response() {}

/// Deletes a stored response; passed through, not charged.
#[utoipa::path(delete, path = "/v1/responses/{response_id}", tag = "proxy", security(("serviceKey" = [])),
    params(("response_id" = String, Path, description = "The provider's response id")),
    responses((status = 200, description = "The provider's answer, passed through", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (unauthorized, validation_error for an \
            odd response id, forbidden, invalid_upstream, not_found), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json")))))]
fn delete_response() {}

/// Cancels a background response; passed through, not charged.
#[utoipa::path(post, path = "/v1/responses/{response_id}/cancel", tag = "proxy", security(("serviceKey" = [])),
    params(("response_id" = String, Path, description = "The provider's response id")),
    responses((status = 200, description = "The provider's answer, passed through", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (unauthorized, validation_error for an \
            odd response id, forbidden, invalid_upstream, not_found), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json")))))]
fn cancel_response() {}

/// Lists a response's input items; passed through, not charged.
#[utoipa::path(get, path = "/v1/responses/{response_id}/input_items", tag = "proxy", security(("serviceKey" = [])),
    params(("response_id" = String, Path, description = "The provider's response id")),
    responses((status = 200, description = "The provider's answer, passed through", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (unauthorized, validation_error for an \
            odd response id, forbidden, invalid_upstream, not_found), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json")))))]
fn list_response_input_items() {}

/// Counts a prospective request's input tokens; passed through, not charged.
#[utoipa::path(post, path = "/v1/responses/input_tokens", tag = "proxy", security(("serviceKey" = [])),
    request_body(content = ProviderBody, description = "The provider's request, passed through"),
    responses((status = 200, description = "The provider's answer, passed through", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (unauthorized, validation_error for an \
            odd response id, forbidden, invalid_upstream, not_found), or the provider's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error (502: the provider could not be reached), \
            upstream_timeout (504), service_unavailable (503), or the provider's own server error passed through",
            content((ProviderBody = "application/json")))))]
fn count_response_input_tokens() {}

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

/// Azure OpenAI chat completions on a deployment (`api-version` in the query). The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/deployments/{deployment}/chat/completions", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders, ("deployment" = String, Path, description = "The Azure deployment; the stored credential's `deployments` names its model")),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_deployment_chat() {}

/// Azure OpenAI Responses on a deployment. The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/deployments/{deployment}/responses", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders, ("deployment" = String, Path, description = "The Azure deployment; the stored credential's `deployments` names its model")),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_deployment_responses() {}

/// Azure OpenAI embeddings on a deployment. The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/deployments/{deployment}/embeddings", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders, ("deployment" = String, Path, description = "The Azure deployment; the stored credential's `deployments` names its model")),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_deployment_embeddings() {}

/// Azure OpenAI chat completions, v1 path (the deployment in `model`). The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/v1/chat/completions", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_v1_chat() {}

/// Azure OpenAI Responses, v1 path. The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/v1/responses", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_v1_responses() {}

/// Azure OpenAI embeddings, v1 path. The spendgate key in `api-key`, `Authorization: Bearer` or
/// `X-Service-Key`; forwarded to the stored `azure` credential's endpoint with its key
/// in `api-key`; priced by the model the answer names, else the deployment's model.
#[utoipa::path(post, path = "/azure/openai/v1/embeddings", tag = "proxy",
    security(("serviceKey" = [])), params(ProxyHeaders),
    request_body(content = ProviderBody, description = "The OpenAI-format request, passed through"),
    responses(
        (status = 200, description = "Azure's answer (JSON, or `text/event-stream` when streaming)",
            content((ProviderBody = "application/json"), (String = "text/event-stream"))),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no azure credential \
            is stored), or Azure's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Azure's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn azure_v1_embeddings() {}

/// Amazon Bedrock Converse (JSON). The spendgate key as a Bedrock API key (`Authorization: Bearer`) or in
/// `X-Service-Key` (the client's own signature is dropped); forwarded to the stored
/// `bedrock` credential's endpoint (else the region's runtime endpoint), signed with
/// SigV4 from its access key pair or with its API key; priced by the model id
/// (cross-region profiles priced apart where Bedrock does; an ARN names its id).
#[utoipa::path(post, path = "/bedrock/model/{model}/converse", tag = "proxy",
    security(("serviceKey" = [])),
    params(ProxyHeaders, ("model" = String, Path, description = "A Bedrock model id, inference profile or URL-encoded ARN")),
    request_body(content = ProviderBody, description = "The Bedrock request, passed through"),
    responses(
        (status = 200, description = "Bedrock's answer", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no bedrock credential \
            is stored), or Bedrock's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Bedrock's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn bedrock_converse() {}

/// Amazon Bedrock InvokeModel (JSON): Anthropic's messages for a Claude model, Converse's shape for Amazon Nova. The spendgate key as a Bedrock API key (`Authorization: Bearer`) or in
/// `X-Service-Key` (the client's own signature is dropped); forwarded to the stored
/// `bedrock` credential's endpoint (else the region's runtime endpoint), signed with
/// SigV4 from its access key pair or with its API key; priced by the model id
/// (cross-region profiles priced apart where Bedrock does; an ARN names its id).
#[utoipa::path(post, path = "/bedrock/model/{model}/invoke", tag = "proxy",
    security(("serviceKey" = [])),
    params(ProxyHeaders, ("model" = String, Path, description = "A Bedrock model id, inference profile or URL-encoded ARN")),
    request_body(content = ProviderBody, description = "The Bedrock request, passed through"),
    responses(
        (status = 200, description = "Bedrock's answer", body = ProviderBody),
        (status = "4XX", description = "Our errors in the envelope (invalid_upstream when no bedrock credential \
            is stored), or Bedrock's own error passed through", content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Bedrock's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn bedrock_invoke() {}

/// Amazon Bedrock ConverseStream (an AWS event stream, passed through; usage from its metadata event). Authenticated, signed and priced as `/converse`; a stream cut before its
/// usage is charged the estimate.
#[utoipa::path(post, path = "/bedrock/model/{model}/converse-stream", tag = "proxy",
    security(("serviceKey" = [])),
    params(ProxyHeaders, ("model" = String, Path, description = "A Bedrock model id, inference profile or URL-encoded ARN")),
    request_body(content = ProviderBody, description = "The Bedrock request, passed through"),
    responses(
        (status = 200, description = "Bedrock's event stream", content((String = "application/vnd.amazon.eventstream"))),
        (status = "4XX", description = "Our errors in the envelope, or Bedrock's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Bedrock's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn bedrock_converse_stream() {}

/// Amazon Bedrock InvokeModelWithResponseStream (an AWS event stream, passed through; usage from the last chunk's invocation metrics). Authenticated, signed and priced as `/converse`; a stream cut before its
/// usage is charged the estimate.
#[utoipa::path(post, path = "/bedrock/model/{model}/invoke-with-response-stream", tag = "proxy",
    security(("serviceKey" = [])),
    params(ProxyHeaders, ("model" = String, Path, description = "A Bedrock model id, inference profile or URL-encoded ARN")),
    request_body(content = ProviderBody, description = "The Bedrock request, passed through"),
    responses(
        (status = 200, description = "Bedrock's event stream", content((String = "application/vnd.amazon.eventstream"))),
        (status = "4XX", description = "Our errors in the envelope, or Bedrock's own error passed through",
            content((ProviderBody = "application/json"))),
        (status = "5XX", description = "upstream_error, upstream_timeout, service_unavailable, or Bedrock's own \
            server error passed through", content((ProviderBody = "application/json"))),
    ))]
fn bedrock_invoke_stream() {}

/// One MCP message (JSON-RPC request, notification or response) to the organization's
/// MCP server `name`, over MCP's streamable HTTP transport; `tools/call` is priced and
/// charged to the budgets, `tools/list` shows only the key's `allowedTools`.
#[utoipa::path(post, path = "/mcp/{name}", tag = "proxy", security(("serviceKey" = []), ("serviceKeyBearer" = [])),
    params(("name" = String, Path, description = "The MCP server's name (`/api/mcp-servers`)")),
    request_body(content = ProviderBody, description = "A JSON-RPC message"),
    responses((status = 200, description = "The server's answer as it sent it: application/json or \
            text/event-stream; a refused tools/call is a JSON-RPC result with isError: true and \
            _meta[\"spendgate/denial\"]", body = ProviderBody),
        (status = 202, description = "A notification or response accepted by the server"),
        (status = 401, description = "unauthorized: no valid key (nothing reached the server)"),
        (status = 404, description = "not_found: no such server in the key's organization, or a session \
            id another key opened"),
        (status = "5XX", description = "upstream_error, upstream_timeout, or the server's own error passed through")))]
fn mcp_gateway_post() {}

/// The MCP server's SSE stream for the session (`Mcp-Session-Id`).
#[utoipa::path(get, path = "/mcp/{name}", tag = "proxy", security(("serviceKey" = []), ("serviceKeyBearer" = [])),
    params(("name" = String, Path, description = "The MCP server's name")),
    responses((status = 200, description = "text/event-stream, passed through event by event"),
        (status = 401, description = "unauthorized"), (status = 404, description = "not_found")))]
fn mcp_gateway_get() {}

/// Ends the MCP session (`Mcp-Session-Id`) at the server and at the gateway.
#[utoipa::path(delete, path = "/mcp/{name}", tag = "proxy", security(("serviceKey" = []), ("serviceKeyBearer" = [])),
    params(("name" = String, Path, description = "The MCP server's name")),
    responses((status = 200, description = "The server's answer, passed through"),
        (status = 400, description = "validation_error: no Mcp-Session-Id"),
        (status = 401, description = "unauthorized"), (status = 404, description = "not_found")))]
fn mcp_gateway_delete() {}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    chat_completions,
    create_response,
    create_embeddings,
    retrieve_response,
    delete_response,
    cancel_response,
    list_response_input_items,
    count_response_input_tokens,
    messages,
    gemini_generate,
    gemini_stream,
    azure_deployment_chat,
    azure_deployment_responses,
    azure_deployment_embeddings,
    azure_v1_chat,
    azure_v1_responses,
    azure_v1_embeddings,
    bedrock_converse,
    bedrock_invoke,
    bedrock_converse_stream,
    bedrock_invoke_stream,
    mcp_budget_check,
    mcp_events,
    mcp_gateway_post,
    mcp_gateway_get,
    mcp_gateway_delete,
    super::health::get_health,
    super::health::get_ready,
    super::health::get_metrics,
    super::health::get_feature_flags,
    super::internal::invalidate_budget,
    super::internal::get_velocity_state,
    super::policy::get_policy
))]
pub struct ApiDoc;

/// The provider routes' paths, each served a second time under
/// `/upstreams/{upstream}` for an operator-defined upstream of its format.
const PROVIDER_PATHS: [&str; 10] = [
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1/responses/{response_id}",
    "/v1/responses/{response_id}/cancel",
    "/v1/responses/{response_id}/input_items",
    "/v1/embeddings",
    "/v1/messages",
    "/v1beta/models/{model}:generateContent",
    "/v1beta/models/{model}:streamGenerateContent",
];

/// The proxy's part of the OpenAPI document: [`ApiDoc`], plus a twin of each provider
/// operation under `/upstreams/{upstream}` (same rules; not found when no configured
/// upstream of that name speaks the route's format), with its own operation id.
pub fn document() -> utoipa::openapi::OpenApi {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::{ObjectBuilder, Required, Type};
    use utoipa::OpenApi;

    let mut doc = ApiDoc::openapi();
    let upstream = ParameterBuilder::new()
        .name("upstream")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some("A configured upstream's name (operator-defined upstreams)"))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build();
    let twins: Vec<_> = PROVIDER_PATHS
        .iter()
        .filter_map(|path| {
            let mut item = doc.paths.paths.get(*path)?.clone();
            for op in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
                op.operation_id = op.operation_id.as_ref().map(|id| format!("upstream_{id}"));
                op.parameters.get_or_insert_with(Vec::new).insert(0, upstream.clone());
            }
            Some((format!("/upstreams/{{upstream}}{path}"), item))
        })
        .collect();
    doc.paths.paths.extend(twins);
    doc
}
