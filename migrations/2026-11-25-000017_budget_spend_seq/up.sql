-- How many accounting commits have added spend to the row. Each commit's spend update
-- increments it and reads it back in the same statement, and tells the budget actors
-- that number with its settles; an actor that reads the row knows exactly which of those
-- settles the row already counts, on every instance (see `actors::store::SpendMark`).
ALTER TABLE budgets ADD COLUMN spend_seq BIGINT NOT NULL DEFAULT 0;
