-- Live spendgate processes: each refreshes its row every few seconds. An
-- idempotency claim records the process that owns it; a claim whose owner has no
-- fresh heartbeat belongs to a dead process and a retry takes it over at once.
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    started_at BIGINT NOT NULL,
    last_seen BIGINT NOT NULL
);
ALTER TABLE idempotency_keys ADD COLUMN owner_instance TEXT;
