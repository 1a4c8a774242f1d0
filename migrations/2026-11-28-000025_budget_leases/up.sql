-- Budget leases (issue #28): the slice of a budget's room one instance holds on
-- PostgreSQL and admits calls against in memory (src/leases/, src/db/budget_leases.rs).
-- A lease's amount is part of its budget's reserved_microdollars, so the sum of live
-- slices and committed spend never passes a strict limit. The owner returns unused room
-- when the budget goes quiet, changes, or at shutdown; another instance frees the slices
-- of an instance whose heartbeat (instances.last_seen) lapsed.
--   tight  the room left limited the lease's last growth, or it was asked to give its
--          room back: it holds nothing beyond its calls in flight, so an instance
--          refused on the budget has nothing to wait for from it.
CREATE TABLE budget_leases (
    id TEXT PRIMARY KEY,
    budget_id TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    amount_microdollars BIGINT NOT NULL,
    tight BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at BIGINT NOT NULL
);
CREATE INDEX budget_leases_budget ON budget_leases (budget_id);
CREATE INDEX budget_leases_instance ON budget_leases (instance_id);
