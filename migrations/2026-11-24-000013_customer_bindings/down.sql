DROP TABLE customer_bindings;
