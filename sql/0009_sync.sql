-- Sync for an offline-first app: every change to a device's logs (insert, update, delete) gets the next number
-- of that device's change counter, and a client pulls "changes after number N".
--
-- Why a per-device counter taken under the device row's lock, and not timestamps: a transaction that read
-- now() early can commit after a reader has moved past that time, and its change would be skipped for good.
-- Here the counter is incremented by UPDATE devices … RETURNING in the same transaction as the change, which
-- locks the device row until that transaction ends; the next change of the same device waits for that lock,
-- so it gets a larger number AND commits later. Whenever a reader sees number N, every smaller number of that
-- device is already committed (or rolled back, leaving a harmless gap). "Changes after the last number I saw"
-- therefore never skips one. The price: writes of ONE device are serialised, which is what one person's
-- phones produce anyway; different devices never wait for each other.

ALTER TABLE devices ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;
-- Tombstones up to this number have been purged: a cursor below it may have missed deletes (410).
ALTER TABLE devices ADD COLUMN purged_through_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE poop_logs ADD COLUMN change_seq bigint;

-- Existing rows, numbered per device in the order they last changed. The owner runs migrations and row-level
-- security is forced: lifted for this transaction only, so the backfill sees every device's rows.
ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY;
ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
WITH numbered AS (
    SELECT id, row_number() OVER (PARTITION BY device_id ORDER BY updated_at, id) AS seq FROM poop_logs
)
UPDATE poop_logs l SET change_seq = n.seq FROM numbered n WHERE n.id = l.id;
UPDATE devices d SET change_seq = coalesce((SELECT max(l.change_seq) FROM poop_logs l WHERE l.device_id = d.id), 0);
ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY;
ALTER TABLE devices FORCE ROW LEVEL SECURITY;
ALTER TABLE poop_logs ALTER COLUMN change_seq SET NOT NULL;

CREATE INDEX poop_logs_device_change_idx ON poop_logs (device_id, change_seq);

-- Deleted logs, so that a pull can tell the client; kept POOPYPALS_TOMBSTONE_DAYS, purged by `poopypals
-- maintenance`.
CREATE TABLE poop_log_tombstones (
    device_id uuid NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    id uuid NOT NULL,
    change_seq bigint NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (device_id, id)
);
CREATE INDEX poop_log_tombstones_device_change_idx ON poop_log_tombstones (device_id, change_seq);
CREATE INDEX poop_log_tombstones_deleted_at_idx ON poop_log_tombstones (deleted_at);

ALTER TABLE poop_log_tombstones ENABLE ROW LEVEL SECURITY;
ALTER TABLE poop_log_tombstones FORCE ROW LEVEL SECURITY;
CREATE POLICY "Devices can read own data" ON poop_log_tombstones
    FOR SELECT USING (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can insert own data" ON poop_log_tombstones
    FOR INSERT WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can update own data" ON poop_log_tombstones
    FOR UPDATE USING (device_id = (SELECT get_current_device_id()))
    WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can delete own data" ON poop_log_tombstones
    FOR DELETE USING (device_id = (SELECT get_current_device_id()));

GRANT SELECT, INSERT, UPDATE, DELETE ON poop_log_tombstones TO poopypals_app;
-- The trigger below runs as the caller: the service role counts its own device's changes. (A device could
-- also write its own counter directly; that can only confuse its own sync.)
GRANT UPDATE (change_seq) ON devices TO poopypals_app;

-- Numbers every change and records deletes. Runs in the changing transaction, under row-level security.
CREATE FUNCTION poop_logs_track_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE public.devices SET change_seq = change_seq + 1 WHERE id = OLD.device_id RETURNING change_seq INTO seq;
        IF seq IS NOT NULL THEN
            INSERT INTO public.poop_log_tombstones (device_id, id, change_seq) VALUES (OLD.device_id, OLD.id, seq)
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = now();
        END IF;
        RETURN OLD;
    END IF;
    UPDATE public.devices SET change_seq = change_seq + 1 WHERE id = NEW.device_id RETURNING change_seq INTO seq;
    -- Not the calling device's row (or no such device): leave the row as it is, and let row-level security
    -- (42501) or the foreign key (23503) refuse it, as they did before this trigger existed.
    IF seq IS NULL THEN
        NEW.change_seq := coalesce(NEW.change_seq, 0);
        RETURN NEW;
    END IF;
    NEW.change_seq := seq;
    IF TG_OP = 'INSERT' THEN
        -- A log re-created under a deleted id: its tombstone is obsolete.
        DELETE FROM public.poop_log_tombstones WHERE device_id = NEW.device_id AND id = NEW.id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER poop_logs_track_change_write BEFORE INSERT OR UPDATE ON poop_logs
    FOR EACH ROW EXECUTE FUNCTION poop_logs_track_change();
CREATE TRIGGER poop_logs_track_change_delete AFTER DELETE ON poop_logs
    FOR EACH ROW EXECUTE FUNCTION poop_logs_track_change();
