DROP TABLE budget_leases;
