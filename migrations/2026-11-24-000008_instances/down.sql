ALTER TABLE idempotency_keys DROP COLUMN owner_instance;
DROP TABLE instances;
