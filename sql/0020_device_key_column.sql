-- poopypals:no-transaction
-- Rotation and erasure in time independent of the device's size (issue 41, item 4), step 1 of 2: the key gets a
-- column of its own. Until now a device's id WAS its key (sql/0010), and its logs, tombstones and change numbers
-- referenced it, so rotating rewrote every log of the device (ON UPDATE CASCADE) in one statement: 307 500 logs
-- timed out, and a leaked id could be made impossible to rotate away. From 0021 on, `devices.id` is a stable
-- internal id that never changes (the logs keep pointing at it), and `devices.key` is what `app.device_id` is
-- compared with: rotating is a one-row update.
--
-- Online, in steps each of which can be re-run: existing devices keep their id as their internal id, and their key
-- is that same value (copied in batches of 5 000, each its own transaction, so no device row stays locked for long);
-- a device registered meanwhile by the running service gets its key from a transitional trigger (dropped in 0021);
-- then the key's unique index is built without blocking writes.

-- An index a failed concurrent build left INVALID is dropped first (as in 0018), so that a retry builds it again
-- instead of skipping it (IF NOT EXISTS) and recording the migration as applied.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'devices_key_key' AND NOT i.indisvalid) THEN
        DROP INDEX devices_key_key;
    END IF;
    IF EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'devices_erasing_idx' AND NOT i.indisvalid) THEN
        DROP INDEX devices_erasing_idx;
    END IF;
END
$$;

ALTER TABLE devices ADD COLUMN IF NOT EXISTS key uuid;
-- Set when the device's erasure begins (0021): from then on its id works for nothing but following the erasure.
ALTER TABLE devices ADD COLUMN IF NOT EXISTS erasing_since timestamptz;

-- Until 0021: a row written with an id and no key (the service before this change) gets key = id; a rotation of
-- that service (which changes the id) carries the key along.
CREATE OR REPLACE FUNCTION devices_key_follows_id() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.key IS NULL OR TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id THEN
        NEW.key := NEW.id;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS devices_key_follows_id ON devices;

CREATE TRIGGER devices_key_follows_id BEFORE INSERT OR UPDATE OF id ON devices
    FOR EACH ROW EXECUTE FUNCTION devices_key_follows_id();

-- The copy runs as the profile role, whose policies show it every device (sql/0010): row-level security stays
-- forced for the owner throughout.
GRANT UPDATE (key) ON devices TO poopypals_profiles;

-- In primary-key order from where the last batch ended, so that each batch reads only its own rows (a scan
-- for "key IS NULL" from the start each time would make the copy quadratic in the number of devices).
DO $$
DECLARE
    last uuid := '00000000-0000-0000-0000-000000000000';
    batch_end uuid;
BEGIN
    LOOP
        PERFORM set_config('role', 'poopypals_profiles', true);
        SELECT b.id INTO batch_end FROM (SELECT c.id FROM devices c WHERE c.id > last ORDER BY c.id LIMIT 5000) b
        ORDER BY b.id DESC LIMIT 1;
        EXIT WHEN batch_end IS NULL;
        UPDATE devices d SET key = d.id WHERE d.id > last AND d.id <= batch_end AND d.key IS NULL;
        last := batch_end;
        COMMIT;
    END LOOP;
    COMMIT;
END
$$;

-- Every row has its key: checked once without blocking writes, so that 0021's SET NOT NULL needs no scan.
ALTER TABLE devices DROP CONSTRAINT IF EXISTS devices_key_present;
ALTER TABLE devices ADD CONSTRAINT devices_key_present CHECK (key IS NOT NULL) NOT VALID;
ALTER TABLE devices VALIDATE CONSTRAINT devices_key_present;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS devices_key_key ON devices (key);
-- The devices being erased, oldest first, for whoever finishes their erasure (0021).
CREATE INDEX CONCURRENTLY IF NOT EXISTS devices_erasing_idx ON devices (erasing_since) WHERE erasing_since IS NOT NULL;
