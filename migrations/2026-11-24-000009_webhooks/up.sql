-- Webhook endpoints, their deliveries, and the lease that makes one instance the
-- deliverer of an endpoint when several share a PostgreSQL database.

CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    url TEXT NOT NULL,
    description TEXT,
    -- JSON array of event kinds; [] = every kind.
    event_types TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    api_version TEXT NOT NULL,
    payload_mode TEXT NOT NULL,
    signing_secret TEXT NOT NULL,
    -- The secret before the last rotation; deliveries carry its signature too until
    -- previous_secret_expires_at (24 hours after the rotation).
    previous_secret TEXT,
    previous_secret_expires_at BIGINT,
    secret_rotated_at BIGINT,
    -- Set at the first failed attempt after a success, cleared by the next success.
    failing_since BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org_id, created_at);

-- One row per (endpoint, outbox event), written in the transaction that writes the
-- outbox row, so nothing an endpoint subscribed to can be lost.
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    outbox_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    -- pending, delivered, failed
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    last_attempt_at BIGINT,
    response_status BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, status, next_attempt_at);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (endpoint_id, created_at);
CREATE INDEX webhook_deliveries_outbox ON webhook_deliveries (outbox_id);

CREATE TABLE webhook_leases (
    endpoint_id TEXT PRIMARY KEY,
    owner_instance TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
