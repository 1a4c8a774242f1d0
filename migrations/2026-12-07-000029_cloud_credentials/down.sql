ALTER TABLE provider_credentials DROP COLUMN details;
