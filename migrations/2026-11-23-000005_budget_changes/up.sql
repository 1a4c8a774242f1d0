-- Budget configuration changes (upsert, reset, delete), written in the same
-- transaction as the change: every instance polls this to refresh its live budget
-- actors, so a change made through one instance (or a control-plane-only process)
-- takes effect on all of them within a second. Rows older than an hour are pruned.
CREATE TABLE budget_changes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE INDEX budget_changes_at ON budget_changes (changed_at);
