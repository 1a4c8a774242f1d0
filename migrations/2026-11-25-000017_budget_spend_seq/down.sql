ALTER TABLE budgets DROP COLUMN spend_seq;
