DROP TABLE key_changes;
