//! Row and insert structs, one per table.

use diesel::prelude::*;

use crate::db::schema::*;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = users)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    pub password_hash: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = organizations)]
pub struct Organization {
    pub id: String,
    pub name: String,
    pub plan: String,
    pub governed_requests: i64,
    pub usage_period_start: i64,
    pub upgrade_url: Option<String>,
    pub customer_upgrade_url: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// `estimate` or `block`: what a call to a model without a price does.
    pub unpriced_models: String,
    /// `allow` or `block`: what a gateway tool call of a tool without a cost does.
    pub unpriced_tools: String,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = memberships)]
pub struct Membership {
    pub org_id: String,
    pub user_id: String,
    pub role: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sessions)]
pub struct Session {
    pub id: String,
    pub user_id: String,
    pub org_id: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = invitations)]
pub struct Invitation {
    pub id: String,
    pub org_id: String,
    pub email: String,
    pub role: String,
    pub token_hash: String,
    pub invited_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub accepted_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    pub id: String,
    pub org_id: String,
    pub user_id: String,
    pub name: String,
    pub key_prefix: String,
    pub key_hash: String,
    pub default_tags: String,
    pub allowed_models: Option<String>,
    pub allowed_providers: Option<String>,
    pub allowed_customers: Option<String>,
    pub require_customer_id: bool,
    pub api_version: Option<String>,
    pub last_used_at: Option<i64>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub require_stored_credentials: bool,
    /// JSON array of `server/tool` or `server/*`; NULL = every MCP tool.
    pub allowed_tools: Option<String>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_events)]
pub struct AuditEvent {
    pub id: String,
    pub org_id: String,
    pub actor_id: Option<String>,
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub metadata: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = budgets, treat_none_as_null = true)]
pub struct Budget {
    pub id: String,
    pub org_id: String,
    pub entity_type: String,
    pub entity_id: String,
    pub max_budget_microdollars: i64,
    pub spend_microdollars: i64,
    pub reserved_microdollars: i64,
    pub policy: String,
    pub reset_interval: Option<String>,
    pub current_period_start: Option<i64>,
    /// JSON array of integers.
    pub threshold_percentages: String,
    pub velocity_limit_microdollars: Option<i64>,
    pub velocity_window_seconds: Option<i64>,
    pub velocity_cooldown_seconds: Option<i64>,
    pub session_limit_microdollars: Option<i64>,
    pub finalization_reserve_microdollars: Option<i64>,
    pub loop_max_calls: Option<i64>,
    pub loop_window_seconds: Option<i64>,
    pub loop_aggregate_max_keys: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Strict budgets only: clamp a call's output bound to the room left.
    pub exact_ceiling: bool,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = cost_events, treat_none_as_default_value = false)]
pub struct CostEvent {
    pub id: String,
    pub org_id: String,
    pub request_id: String,
    pub api_key_id: Option<String>,
    pub user_id: Option<String>,
    pub provider: String,
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_microdollars: i64,
    pub duration_ms: Option<i64>,
    pub upstream_duration_ms: Option<i64>,
    pub session_id: Option<String>,
    pub trace_id: Option<String>,
    pub event_type: String,
    pub tool_name: Option<String>,
    pub tool_server: Option<String>,
    /// JSON object of string to string.
    pub tags: String,
    pub customer_id: Option<String>,
    /// JSON `{ input, output, cached, reasoning? }`.
    pub cost_breakdown: Option<String>,
    pub source: String,
    pub budget_status: String,
    pub action_id: Option<String>,
    pub estimated: bool,
    pub created_at: i64,
    /// JSON array of `{ name, id }` (proxied calls whose response asked for tools).
    pub tool_calls_requested: Option<String>,
    pub tool_definition_tokens: i64,
    /// The event's dedup identity within (organization, provider): the `requestId` of
    /// an ingested event, `call:<id>` for proxied calls, tool events and denial records
    /// (never deduplicated: every admitted call is charged).
    pub dedup_key: String,
}

/// Request and response bodies of a proxied call (Pro and above), each capped at 1 MB.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = cost_event_bodies, treat_none_as_default_value = false)]
pub struct CostEventBody {
    pub event_id: String,
    pub org_id: String,
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    pub request_truncated: bool,
    pub response_truncated: bool,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = cost_event_tags, treat_none_as_default_value = false)]
pub struct CostEventTag {
    pub event_id: String,
    pub org_id: String,
    pub tag_key: String,
    pub tag_value: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = event_outbox, treat_none_as_default_value = false)]
pub struct OutboxEvent {
    pub id: String,
    pub org_id: String,
    pub event_type: String,
    pub payload: String,
    pub created_at: i64,
    pub dispatched_at: Option<i64>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = idempotency_keys)]
pub struct IdempotencyRecord {
    pub id: String,
    pub request_hash: String,
    pub state: String,
    pub response_status: Option<i64>,
    pub response_body: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    /// The process (`AppState::instance_id`) running the claimed request.
    pub owner_instance: Option<String>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = tool_costs)]
pub struct ToolCost {
    pub id: String,
    pub org_id: String,
    pub user_id: String,
    pub server_name: String,
    pub tool_name: String,
    pub cost_microdollars: i64,
    pub suggested_cost: Option<i64>,
    /// `discovered` or `manual`.
    pub source: String,
    pub description: Option<String>,
    /// JSON object text.
    pub annotations: Option<String>,
    pub last_seen_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = customer_bindings)]
pub struct CustomerBinding {
    pub id: String,
    pub org_id: String,
    pub customer_id: String,
    pub plan_ref: String,
    pub budget_cap_microdollars: i64,
    pub margin_target_percent: Option<i64>,
    /// `active`, `suspended` or `archived`.
    pub status: String,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_endpoints, treat_none_as_default_value = false)]
pub struct WebhookEndpoint {
    pub id: String,
    pub org_id: String,
    pub url: String,
    pub description: Option<String>,
    /// JSON array of event kinds; `[]` = every kind.
    pub event_types: String,
    pub enabled: bool,
    pub api_version: String,
    pub payload_mode: String,
    pub signing_secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<i64>,
    pub secret_rotated_at: Option<i64>,
    pub failing_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_deliveries, treat_none_as_default_value = false)]
pub struct WebhookDelivery {
    pub id: String,
    pub endpoint_id: String,
    pub outbox_id: String,
    pub event_type: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub last_attempt_at: Option<i64>,
    pub response_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
}

/// An action (`svc_act_…` on the wire). JSON columns (`payload`, `metadata`, `result`)
/// hold serialized objects; user ids are bare.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = actions, treat_none_as_default_value = false)]
pub struct ActionRow {
    pub id: String,
    pub org_id: String,
    pub api_key_id: Option<String>,
    pub agent_id: String,
    pub action_type: String,
    pub status: String,
    pub payload: String,
    pub metadata: Option<String>,
    pub result: Option<String>,
    pub error_message: Option<String>,
    pub environment: Option<String>,
    pub source_framework: Option<String>,
    pub approved_by: Option<String>,
    pub rejected_by: Option<String>,
    pub created_at: i64,
    pub approved_at: Option<i64>,
    pub rejected_at: Option<i64>,
    pub executed_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub updated_at: i64,
    pub version: i64,
}

/// The columns one transition writes.
#[derive(Debug, Clone, AsChangeset)]
#[diesel(table_name = actions, treat_none_as_null = true)]
pub struct ActionUpdate {
    pub status: String,
    pub version: i64,
    pub updated_at: i64,
    pub approved_at: Option<i64>,
    pub approved_by: Option<String>,
    pub rejected_at: Option<i64>,
    pub rejected_by: Option<String>,
    pub executed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub result: Option<String>,
    pub error_message: Option<String>,
}

/// A provider credential held for an organization; the secret stays encrypted here.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = provider_credentials)]
pub struct ProviderCredential {
    pub id: String,
    pub org_id: String,
    pub upstream: String,
    pub name: Option<String>,
    pub encrypted_secret: String,
    pub secret_prefix: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// A cloud credential's non-secret parts (JSON), shown in lists.
    pub details: Option<String>,
}

/// An MCP server of an organization; its headers stay encrypted here.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = mcp_servers)]
pub struct McpServer {
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub url: String,
    /// JSON array of the header names.
    pub header_names: String,
    pub encrypted_headers: Option<String>,
    pub created_at: i64,
}

/// A price an organization set at run time, in µ$ per million tokens.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = model_prices)]
pub struct RuntimePrice {
    pub id: String,
    pub org_id: String,
    pub provider: String,
    pub model: String,
    pub input: i64,
    pub output: i64,
    pub cached_input: Option<i64>,
    pub cache_write_5m: Option<i64>,
    pub cache_write_1h: Option<i64>,
    pub reasoning_output: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}
