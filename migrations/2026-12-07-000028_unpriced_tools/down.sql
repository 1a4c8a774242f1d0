ALTER TABLE organizations DROP COLUMN unpriced_tools;
