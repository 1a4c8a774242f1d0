-- Provider credentials held by the gateway: one per organization and upstream, the
-- secret AES-256-GCM encrypted under the configured (or generated) secret_key with
-- the organization id as associated data. `secret_prefix` is the few leading
-- characters shown in lists; the secret itself is never returned.
CREATE TABLE provider_credentials (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    upstream TEXT NOT NULL,
    name TEXT,
    encrypted_secret TEXT NOT NULL,
    secret_prefix TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX provider_credentials_org_upstream ON provider_credentials (org_id, upstream);

-- Credential changes (create, rotate, delete), for every instance's decrypted
-- credential cache, like key_changes for the key cache.
CREATE TABLE provider_credential_changes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    upstream TEXT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE INDEX provider_credential_changes_at ON provider_credential_changes (changed_at);

-- A key that must use the gateway's stored credentials: a call bringing its own
-- provider credential is refused.
ALTER TABLE api_keys ADD COLUMN require_stored_credentials BOOLEAN NOT NULL DEFAULT FALSE;
