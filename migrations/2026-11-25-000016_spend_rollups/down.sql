DELETE FROM cost_rollups WHERE dim IN ('spend_key', 'spend_user', 'spend_customer', 'spend_tag', 'governed');
DELETE FROM rollup_backfill WHERE id = 2;
ALTER TABLE rollup_backfill DROP COLUMN dims;
