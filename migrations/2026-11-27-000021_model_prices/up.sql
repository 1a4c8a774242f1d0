-- Prices an organization sets at run time, over the built-in table and the operator's
-- pricing file: one row per (organization, provider, model), in microdollars per
-- million tokens. `provider` is openai, anthropic, google or an operator-defined
-- upstream's name; `model` is matched exactly as a call sends it.
CREATE TABLE model_prices (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input BIGINT NOT NULL,
    output BIGINT NOT NULL,
    cached_input BIGINT,
    cache_write_5m BIGINT,
    cache_write_1h BIGINT,
    reasoning_output BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX model_prices_org_provider_model ON model_prices (org_id, provider, model);

-- Changes of an organization's runtime prices or of its unpricedModels setting, for
-- every instance's price cache, like provider_credential_changes.
CREATE TABLE model_price_changes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE INDEX model_price_changes_at ON model_price_changes (changed_at);

-- What a proxied call to a model without a price does: 'estimate' (charged at the
-- conservative fallback price, tagged) or 'block' (refused before it is forwarded).
ALTER TABLE organizations ADD COLUMN unpriced_models TEXT NOT NULL DEFAULT 'estimate';
