ALTER TABLE budgets DROP COLUMN exact_ceiling;
