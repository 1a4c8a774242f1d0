DROP TABLE webhook_leases;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
