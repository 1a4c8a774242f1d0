DROP TABLE idempotency_keys;
DROP TABLE event_outbox;
DROP TABLE cost_event_tags;
DROP TABLE cost_events;
DROP TABLE budget_reservations;
DROP TABLE budgets;
