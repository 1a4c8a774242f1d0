-- Per-customer bindings (POST /v1/bind): one per (organization, customer). The
-- binding's cap is the customer's budget: bind writes the budgets row (entity_type
-- 'customer') in the same transaction, so the budget actors enforce it.
CREATE TABLE customer_bindings (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    plan_ref TEXT NOT NULL,
    budget_cap_microdollars BIGINT NOT NULL,
    margin_target_percent BIGINT,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX customer_bindings_customer ON customer_bindings (org_id, customer_id);
