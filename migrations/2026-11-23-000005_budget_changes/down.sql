DROP TABLE budget_changes;
