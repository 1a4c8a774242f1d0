-- A cloud credential's parts that are not secret (access key id, region, service
-- account email, endpoint, deployments), as JSON, shown in lists beside the secret's
-- prefix. NULL for a plain API key.
ALTER TABLE provider_credentials ADD COLUMN details TEXT;
