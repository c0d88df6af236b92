-- Quotas per device (issue 41): nothing bounded what one anonymous client stores (43 000 logs for one device in
-- 55 s). Live logs and tombstones are counted on the device row, and a change that takes the device past its
-- quota fails the whole statement (SQLSTATE PPQ01 logs, PPQ02 tombstones): nothing of a refused batch is stored,
-- and every instance of the service shares the same counts.
--
-- The quotas are the transaction's `poopypals.max_logs_per_device` and `poopypals.max_tombstones_per_device`
-- (set by the service in every request transaction from POOPYPALS_MAX_LOGS_PER_DEVICE and
-- POOPYPALS_MAX_TOMBSTONES_PER_DEVICE), else 100 000 and 20 000.
--
-- Counting is statement-level, on the rows really inserted or deleted (transition tables): a row trigger BEFORE
-- INSERT also fires for a row that ON CONFLICT DO NOTHING then skips. For the same reason the tombstone of a
-- re-created id is now deleted here, after the insert, and not by the row trigger before it: a refused create
-- no longer undoes a delete that other phones have not pulled yet (issue 42, item 8).

ALTER TABLE devices ADD COLUMN log_count bigint NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN tombstone_count bigint NOT NULL DEFAULT 0;

-- Existing rows: counted once. Row-level security is lifted for this transaction only, so the owner sees them.
ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY;
ALTER TABLE poop_log_tombstones NO FORCE ROW LEVEL SECURITY;
UPDATE devices d SET log_count = (SELECT count(*) FROM poop_logs l WHERE l.device_id = d.id),
                     tombstone_count = (SELECT count(*) FROM poop_log_tombstones t WHERE t.device_id = d.id);
ALTER TABLE devices FORCE ROW LEVEL SECURITY;
ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY;
ALTER TABLE poop_log_tombstones FORCE ROW LEVEL SECURITY;

-- The service counts its own device's logs; the profile role's erasures (0010) delete logs by cascade, and the
-- counting trigger runs as that role too (it finds the device gone and counts nothing, but needs the privilege).
GRANT UPDATE (log_count, tombstone_count) ON devices TO poopypals_app, poopypals_profiles;

-- The row trigger of 0010, without the tombstone delete on insert (done after the statement, below).
CREATE OR REPLACE FUNCTION poop_logs_track_change() RETURNS trigger
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
    IF TG_OP = 'UPDATE' AND NEW.device_id IS DISTINCT FROM OLD.device_id THEN
        RETURN NEW;
    END IF;
    UPDATE public.devices SET change_seq = change_seq + 1 WHERE id = NEW.device_id RETURNING change_seq INTO seq;
    IF seq IS NULL THEN
        NEW.change_seq := coalesce(NEW.change_seq, 0);
        RETURN NEW;
    END IF;
    NEW.change_seq := seq;
    RETURN NEW;
END
$$;

-- After an INSERT statement: the logs really inserted count, the tombstones of re-created ids go (and stop
-- counting), and a device past its log quota fails the statement.
CREATE FUNCTION poop_logs_count_inserts() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    quota bigint := coalesce(nullif(current_setting('poopypals.max_logs_per_device', true), '')::bigint, 100000);
    most bigint;
BEGIN
    WITH added AS (
        SELECT device_id, count(*) AS n FROM inserted GROUP BY device_id
    ), revived AS (
        DELETE FROM public.poop_log_tombstones t USING inserted i WHERE t.device_id = i.device_id AND t.id = i.id
        RETURNING t.device_id
    ), revived_per_device AS (
        SELECT device_id, count(*) AS n FROM revived GROUP BY device_id
    ), counted AS (
        UPDATE public.devices d SET log_count = d.log_count + a.n, tombstone_count = d.tombstone_count - coalesce(r.n, 0)
        FROM added a LEFT JOIN revived_per_device r USING (device_id)
        WHERE d.id = a.device_id
        RETURNING d.log_count
    )
    SELECT max(log_count) INTO most FROM counted;
    IF most > quota THEN
        RAISE EXCEPTION 'a device may hold at most % logs', quota USING ERRCODE = 'PPQ01';
    END IF;
    RETURN NULL;
END
$$;

-- After a DELETE statement: the logs deleted stop counting, each left a tombstone (the row trigger), and a device
-- past its tombstone quota fails the statement. A cascade from an erased device finds no device row: nothing.
CREATE FUNCTION poop_logs_count_deletes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    quota bigint := coalesce(nullif(current_setting('poopypals.max_tombstones_per_device', true), '')::bigint, 20000);
    most bigint;
BEGIN
    WITH removed AS (
        SELECT device_id, count(*) AS n FROM deleted GROUP BY device_id
    ), counted AS (
        UPDATE public.devices d SET log_count = d.log_count - r.n, tombstone_count = d.tombstone_count + r.n
        FROM removed r WHERE d.id = r.device_id
        RETURNING d.tombstone_count
    )
    SELECT max(tombstone_count) INTO most FROM counted;
    IF most > quota THEN
        RAISE EXCEPTION 'a device may have at most % deleted logs awaiting purge', quota USING ERRCODE = 'PPQ02';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER poop_logs_count_inserts AFTER INSERT ON poop_logs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION poop_logs_count_inserts();
CREATE TRIGGER poop_logs_count_deletes AFTER DELETE ON poop_logs
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION poop_logs_count_deletes();
