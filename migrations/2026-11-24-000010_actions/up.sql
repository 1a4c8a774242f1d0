-- Human-in-the-loop actions. `version` is bumped by every transition, and each
-- transition is written conditionally on the version it read, so two instances on one
-- database never both win one (the loser answers 409 stale_action).
CREATE TABLE actions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    api_key_id TEXT,
    agent_id TEXT NOT NULL,
    action_type TEXT NOT NULL,
    status TEXT NOT NULL,
    payload TEXT NOT NULL,
    metadata TEXT,
    result TEXT,
    error_message TEXT,
    environment TEXT,
    source_framework TEXT,
    approved_by TEXT,
    rejected_by TEXT,
    created_at BIGINT NOT NULL,
    approved_at BIGINT,
    rejected_at BIGINT,
    executed_at BIGINT,
    expires_at BIGINT,
    expired_at BIGINT,
    updated_at BIGINT NOT NULL,
    version BIGINT NOT NULL
);
CREATE INDEX actions_org_created ON actions (org_id, created_at, id);
CREATE INDEX actions_org_status_created ON actions (org_id, status, created_at, id);
-- Startup reloads the timers of pending actions that can expire.
CREATE INDEX actions_pending_expiry ON actions (expires_at) WHERE status = 'pending';

-- GET /api/actions/:id/costs: the cost events of calls that carried X-Service-Action-Id.
CREATE INDEX cost_events_action ON cost_events (org_id, action_id, created_at) WHERE action_id IS NOT NULL;
