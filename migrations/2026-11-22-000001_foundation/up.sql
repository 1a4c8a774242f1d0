-- Identity, organizations, API keys and the audit log.
-- Portable SQL: runs unchanged on SQLite and PostgreSQL (TEXT ids generated in Rust,
-- BIGINT epoch-millisecond timestamps, JSON stored as TEXT).

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    name TEXT,
    password_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE organizations (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    plan TEXT NOT NULL,
    governed_requests BIGINT NOT NULL DEFAULT 0,
    usage_period_start BIGINT NOT NULL DEFAULT 0,
    upgrade_url TEXT,
    customer_upgrade_url TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE memberships (
    org_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_user ON memberships (user_id);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    org_id TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE invitations (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    invited_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    accepted_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX invitations_org ON invitations (org_id, created_at);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    key_prefix TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    default_tags TEXT NOT NULL,
    allowed_models TEXT,
    allowed_providers TEXT,
    allowed_customers TEXT,
    require_customer_id BOOLEAN NOT NULL DEFAULT FALSE,
    api_version TEXT,
    last_used_at BIGINT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX api_keys_org ON api_keys (org_id, created_at);

CREATE TABLE audit_events (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    actor_id TEXT,
    action TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id TEXT,
    metadata TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX audit_events_org ON audit_events (org_id, created_at);
