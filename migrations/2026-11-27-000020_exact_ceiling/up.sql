-- A strict budget that clamps a call's output bound to what its room pays for
-- instead of refusing the call (see the README's "Exact ceiling").
ALTER TABLE budgets ADD COLUMN exact_ceiling BOOLEAN NOT NULL DEFAULT FALSE;
