-- poopypals:no-transaction
-- Log ids scoped to their device (issue 42, item 2): the key of poop_logs becomes (device_id, id). A log id was
-- global: for an id another device owned, a create answered 409 log_id_in_use while GET, PATCH and DELETE answered
-- 404, so creates were an existence oracle; and one squatted (or reused, or restored) id in an offline queue stopped
-- that phone's sync for good. Now another device's id is exactly a free one, for every route.
--
-- Online: the new unique index is built without blocking writes, then becomes the primary key in place of the old
-- one (a short lock, no rebuild). Both steps can be re-run after a partial failure; an index left invalid by a
-- failed concurrent build is dropped first. The distribution column (device_id) is now in the key, as a
-- distributed table needs (docs/scaling.md).
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'poop_logs_device_id_id_key' AND NOT i.indisvalid) THEN
        DROP INDEX poop_logs_device_id_id_key;
    END IF;
END
$$;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS poop_logs_device_id_id_key ON poop_logs (device_id, id);

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_constraint
                   WHERE conrelid = 'poop_logs'::regclass AND conname = 'poop_logs_pkey' AND cardinality(conkey) = 2) THEN
        ALTER TABLE poop_logs DROP CONSTRAINT poop_logs_pkey;
        ALTER TABLE poop_logs ADD CONSTRAINT poop_logs_pkey PRIMARY KEY USING INDEX poop_logs_device_id_id_key;
    END IF;
END
$$;
