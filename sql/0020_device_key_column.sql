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

DO $$
DECLARE
    moved integer;
BEGIN
    LOOP
        PERFORM set_config('role', 'poopypals_profiles', true);
        UPDATE devices d SET key = d.id
        WHERE d.id IN (SELECT c.id FROM devices c WHERE c.key IS NULL LIMIT 5000);
        GET DIAGNOSTICS moved = ROW_COUNT;
        COMMIT;
        EXIT WHEN moved = 0;
    END LOOP;
END
$$;

-- Every row has its key: checked once without blocking writes, so that 0021's SET NOT NULL needs no scan.
ALTER TABLE devices DROP CONSTRAINT IF EXISTS devices_key_present;
ALTER TABLE devices ADD CONSTRAINT devices_key_present CHECK (key IS NOT NULL) NOT VALID;
ALTER TABLE devices VALIDATE CONSTRAINT devices_key_present;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS devices_key_key ON devices (key);
-- The devices being erased, oldest first, for whoever finishes their erasure (0021).
CREATE INDEX CONCURRENTLY IF NOT EXISTS devices_erasing_idx ON devices (erasing_since) WHERE erasing_since IS NOT NULL;
