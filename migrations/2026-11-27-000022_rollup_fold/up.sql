-- Rollups leave the commit that makes an event durable: a materializer folds committed
-- events into them afterwards (src/db/fold.rs).
--   cost_events.fold_seq  the event's place in commit order, stamped by its commit from
--                         the `clock` mark (NULL: an event from before this migration,
--                         already counted in the rollups by its own commit)
--   fold_marks 'clock'    the last fold_seq handed out; every commit takes this row
--                         first, so commits (of every instance) get their numbers in the
--                         order they become visible
--   fold_marks 'folded'   the last fold_seq whose event is in the rollups; advanced in
--                         the same transaction that adds the events' sums
ALTER TABLE cost_events ADD COLUMN fold_seq BIGINT;
CREATE INDEX cost_events_fold_seq ON cost_events (fold_seq);
CREATE TABLE fold_marks (
    name TEXT PRIMARY KEY NOT NULL,
    seq BIGINT NOT NULL
);
INSERT INTO fold_marks (name, seq) VALUES ('clock', 0);
INSERT INTO fold_marks (name, seq) VALUES ('folded', 0);
