ALTER TABLE organizations DROP COLUMN unpriced_models;
DROP TABLE model_price_changes;
DROP TABLE model_prices;
