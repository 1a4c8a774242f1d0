-- Rollup dimensions for the reads that still scanned raw events (and, with retention
-- on, lost the old ones): budget spend sources, the plan cap's count, and, through
-- the tag dimension, the margins' costs and the unpriced models.
--   spend_key      name API key id     label2 spend source (src/db/rollups.rs, source_label)
--   spend_user     name user id        label2 spend source
--   spend_customer name customer id    label2 spend source
--   spend_tag      name tag key, label1 tag value, label2 spend source
--   governed       (no labels)         proxied events that were not refused
-- The table is unchanged; existing events get the new dimensions back-filled once at
-- the next start (a back-fill row naming only these dimensions: the rows of the
-- others stay as they are, they may hold events retention has since deleted).
ALTER TABLE rollup_backfill ADD COLUMN dims TEXT;
INSERT INTO rollup_backfill (id, done_at, dims)
    VALUES (2, NULL, 'spend_key,spend_user,spend_customer,spend_tag,governed');
