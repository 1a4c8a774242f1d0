-- API key changes (update, revoke; a NULL key_hash: every key of the organization,
-- after a member left or the organization was deleted), for every instance's key
-- cache, like budget_changes for budget actors: a revocation made through one
-- instance stops the key on all of them within about a second.
CREATE TABLE key_changes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    key_hash TEXT,
    changed_at BIGINT NOT NULL
);
CREATE INDEX key_changes_at ON key_changes (changed_at);
