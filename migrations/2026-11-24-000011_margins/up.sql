-- Margins: the payment-processor connection of an organization, what its revenue
-- sync learned (customers, revenue items), customer mappings, the last seen health
-- tier per mapped customer and month, and the lease of the scheduled sync.

-- One connection per organization. The processor key is stored encrypted
-- (AES-256-GCM under the configured secret_key); only its masked prefix is shown.
CREATE TABLE processor_connections (
    org_id TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    key_ciphertext TEXT NOT NULL,
    key_prefix TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_sync_at BIGINT,
    -- `never`, `ok` or `error`.
    sync_status TEXT NOT NULL,
    last_error TEXT,
    -- JSON object currency -> count of invoices the last sync skipped.
    skipped_currencies TEXT NOT NULL
);

CREATE TABLE processor_customers (
    org_id TEXT NOT NULL,
    processor_customer_id TEXT NOT NULL,
    name TEXT,
    email TEXT,
    -- JSON object of the customer's metadata.
    metadata TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, processor_customer_id)
);

-- One row per processor object (invoice, credit note, refund), keyed by its id: a
-- re-sync rewrites the row instead of adding to it, so nothing is counted twice.
-- `amount_microdollars` is signed (credit notes and refunds are negative) and tax
-- excluded; `period` is the UTC month (`YYYY-MM`) the object happened in.
CREATE TABLE revenue_items (
    org_id TEXT NOT NULL,
    object_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    processor_customer_id TEXT NOT NULL,
    period TEXT NOT NULL,
    amount_microdollars BIGINT NOT NULL,
    -- Invoices: total and total excluding tax in cents, to take tax out of refunds.
    gross_cents BIGINT NOT NULL,
    net_cents BIGINT NOT NULL,
    occurred_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, object_id)
);
CREATE INDEX revenue_items_customer_period ON revenue_items (org_id, processor_customer_id, period);

CREATE TABLE customer_mappings (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    processor_customer_id TEXT NOT NULL,
    tag_key TEXT NOT NULL,
    tag_value TEXT NOT NULL,
    match_type TEXT NOT NULL,
    confidence DOUBLE PRECISION,
    created_at BIGINT NOT NULL,
    UNIQUE (org_id, processor_customer_id, tag_key)
);
CREATE INDEX customer_mappings_tag ON customer_mappings (org_id, tag_key, tag_value);

-- The health tier a mapped customer was last seen in, per month: the
-- once-per-transition rule of margin.threshold_crossed is a conditional update here.
CREATE TABLE margin_tiers (
    org_id TEXT NOT NULL,
    processor_customer_id TEXT NOT NULL,
    tag_key TEXT NOT NULL,
    period TEXT NOT NULL,
    tier TEXT NOT NULL,
    -- The margin that tier came from, a decimal (0.35 = 35 %); null without revenue.
    margin DOUBLE PRECISION,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, processor_customer_id, tag_key, period)
);

-- Named leases: the scheduled revenue sync runs on one instance at a time.
CREATE TABLE sync_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
