ALTER TABLE api_keys DROP COLUMN require_stored_credentials;
DROP TABLE provider_credential_changes;
DROP TABLE provider_credentials;
