DROP TABLE tool_costs;
