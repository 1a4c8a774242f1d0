DROP TABLE sync_leases;
DROP TABLE margin_tiers;
DROP TABLE customer_mappings;
DROP TABLE revenue_items;
DROP TABLE processor_customers;
DROP TABLE processor_connections;
