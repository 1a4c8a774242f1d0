-- Budgets, cost events, the event outbox and idempotency records.

CREATE TABLE budgets (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    max_budget_microdollars BIGINT NOT NULL,
    spend_microdollars BIGINT NOT NULL DEFAULT 0,
    -- Sum of live reservations, used on PostgreSQL so several instances arbitrate
    -- through conditional updates. Always 0 on SQLite (one instance owns the file).
    reserved_microdollars BIGINT NOT NULL DEFAULT 0,
    policy TEXT NOT NULL,
    reset_interval TEXT,
    current_period_start BIGINT,
    threshold_percentages TEXT NOT NULL,
    velocity_limit_microdollars BIGINT,
    velocity_window_seconds BIGINT,
    velocity_cooldown_seconds BIGINT,
    session_limit_microdollars BIGINT,
    finalization_reserve_microdollars BIGINT,
    loop_max_calls BIGINT,
    loop_window_seconds BIGINT,
    loop_aggregate_max_keys BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (org_id, entity_type, entity_id)
);

-- Live reservations on PostgreSQL: who holds what, until when (the reaper frees
-- rows of dead requests and instances).
CREATE TABLE budget_reservations (
    id TEXT PRIMARY KEY,
    budget_id TEXT NOT NULL,
    amount_microdollars BIGINT NOT NULL,
    instance_id TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX budget_reservations_budget ON budget_reservations (budget_id);
CREATE INDEX budget_reservations_expiry ON budget_reservations (expires_at);

CREATE TABLE cost_events (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    api_key_id TEXT,
    user_id TEXT,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    cost_microdollars BIGINT NOT NULL,
    duration_ms BIGINT,
    upstream_duration_ms BIGINT,
    session_id TEXT,
    trace_id TEXT,
    event_type TEXT NOT NULL,
    tool_name TEXT,
    tool_server TEXT,
    tags TEXT NOT NULL,
    customer_id TEXT,
    cost_breakdown TEXT,
    source TEXT NOT NULL,
    budget_status TEXT NOT NULL,
    action_id TEXT,
    estimated BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    UNIQUE (org_id, provider, request_id)
);
CREATE INDEX cost_events_org_created ON cost_events (org_id, created_at, id);
CREATE INDEX cost_events_org_key ON cost_events (org_id, api_key_id, created_at);
CREATE INDEX cost_events_org_session ON cost_events (org_id, session_id, created_at);
CREATE INDEX cost_events_org_trace ON cost_events (org_id, trace_id);
CREATE INDEX cost_events_org_customer ON cost_events (org_id, customer_id);
CREATE INDEX cost_events_org_request ON cost_events (org_id, request_id);

-- One row per tag of an event: portable containment filters and group-by-tag.
CREATE TABLE cost_event_tags (
    event_id TEXT NOT NULL,
    org_id TEXT NOT NULL,
    tag_key TEXT NOT NULL,
    tag_value TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (event_id, tag_key)
);
CREATE INDEX cost_event_tags_lookup ON cost_event_tags (org_id, tag_key, tag_value, created_at);
CREATE INDEX cost_event_tags_recent ON cost_event_tags (org_id, created_at);

-- Webhook events, written in the same transaction as the change that caused them.
CREATE TABLE event_outbox (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    dispatched_at BIGINT
);
CREATE INDEX event_outbox_pending ON event_outbox (dispatched_at, created_at);

CREATE TABLE idempotency_keys (
    id TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    response_status BIGINT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
