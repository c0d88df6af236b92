-- One update of the device row per log written, and plans that stay cached (issue 44).
--
-- 1. Since 0014 every log insert and delete updated its device's row twice: the row trigger (change number, write
--    tokens), then a statement trigger with a transition table (log and tombstone counts, quotas). The second
--    update is a second version of the same row in the same transaction, so the foreign key of devices.user_id is
--    checked again (a FOR KEY SHARE lock on the profile row), and the statement trigger's PL/pgSQL and
--    transition-table query cost about as much as the insert itself. Now the row trigger counts too, in its one
--    update:
--    insert  log_count + 1. The statement trigger existed because a BEFORE row trigger also fires for a row that
--            ON CONFLICT DO NOTHING then skips (a create's replay). So, with the device row locked by that update,
--            the trigger looks for the log: if it is there (committed by a transaction that held the same lock
--            before, or written earlier in this one), the insert will be skipped, and the count is taken back (a
--            second update on that path only), the quota is not applied and no tombstone is touched. Otherwise the
--            quota applies (PPQ01) and a tombstone of the same id is deleted (only when the device has any).
--    delete  log_count - 1 and tombstone_count + 1, the tombstone quota (PPQ02) read from the same update (an AFTER
--            row trigger: it fires for rows really deleted).
--    A device being erased is not updated (as in 0021): poopypals_erase_batch takes its deleted logs off
--    log_count once per batch. The statement triggers of 0014 are dropped.
--
-- 2. get_current_device_id() runs with a search_path of its own again. 0023 made it PL/pgSQL without a SET clause,
--    so that its one query is planned once per session; but a cached plan is kept only while the search_path is
--    the one it was planned under, and this function is called under two: the session's (policies of the
--    request's own statements) and pg_catalog, pg_temp (policies of the queries inside the triggers and the
--    profile functions, which set that). Every switch planned its query again: in one create, several times.
--    The look for a skipped log above is such a query, and cost about 300 µs of PostgreSQL's CPU per insert that
--    way; with the function's own search_path, pgbench of the create transaction (8 clients) went from 2 676 to
--    4 100 tps, and the list transaction from 8 500 to 9 500.

ALTER FUNCTION get_current_device_id() SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION poop_logs_track_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst double precision := coalesce(nullif(current_setting('poopypals.device_write_burst', true), '')::double precision, 2000);
    rate double precision := coalesce(nullif(current_setting('poopypals.device_write_rate', true), '')::double precision, 20);
    quota bigint;
    device uuid;
    seq bigint;
    tokens double precision;
    logs bigint;
    tombstones bigint;
BEGIN
    device := CASE WHEN TG_OP = 'DELETE' THEN OLD.device_id ELSE NEW.device_id END;
    IF device IS NULL THEN
        RAISE EXCEPTION 'this device is not registered' USING ERRCODE = 'foreign_key_violation';
    END IF;
    UPDATE public.devices
    SET change_seq = change_seq + 1,
        write_tokens = least(burst, coalesce(write_tokens + greatest(0, extract(epoch FROM now() - write_tokens_at)) * rate, burst)) - 1,
        write_tokens_at = now(),
        log_count = log_count + CASE TG_OP WHEN 'INSERT' THEN 1 WHEN 'DELETE' THEN -1 ELSE 0 END,
        tombstone_count = tombstone_count + CASE TG_OP WHEN 'DELETE' THEN 1 ELSE 0 END
    WHERE id = device AND erasing_since IS NULL
    RETURNING change_seq, write_tokens, log_count, tombstone_count INTO seq, tokens, logs, tombstones;
    IF tokens < 0 THEN
        RAISE EXCEPTION 'this device writes faster than its limit' USING ERRCODE = 'PPR01',
            DETAIL = ceil(-tokens / greatest(rate, 0.0001))::bigint::text;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF seq IS NOT NULL THEN
            quota := coalesce(nullif(current_setting('poopypals.max_tombstones_per_device', true), '')::bigint, 20000);
            IF tombstones > quota THEN
                RAISE EXCEPTION 'a device may have at most % deleted logs awaiting purge', quota USING ERRCODE = 'PPQ02';
            END IF;
            INSERT INTO public.poop_log_tombstones (device_id, id, change_seq) VALUES (OLD.device_id, OLD.id, seq)
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = now();
        END IF;
        RETURN OLD;
    END IF;
    -- Not the calling device's row: leave it as it is, and let row-level security (42501) refuse it.
    NEW.change_seq := coalesce(seq, NEW.change_seq, 0);
    IF TG_OP = 'INSERT' AND seq IS NOT NULL THEN
        -- A new snapshot, taken after the device row's lock: every insert of this device that committed before
        -- is seen here, so a log that ON CONFLICT will skip is known for what it is.
        IF EXISTS (SELECT FROM public.poop_logs l WHERE l.device_id = device AND l.id = NEW.id) THEN
            UPDATE public.devices SET log_count = log_count - 1 WHERE id = device;
        ELSE
            quota := coalesce(nullif(current_setting('poopypals.max_logs_per_device', true), '')::bigint, 100000);
            IF logs > quota THEN
                RAISE EXCEPTION 'a device may hold at most % logs', quota USING ERRCODE = 'PPQ01';
            END IF;
            IF tombstones > 0 THEN
                DELETE FROM public.poop_log_tombstones t WHERE t.device_id = device AND t.id = NEW.id;
                IF FOUND THEN
                    UPDATE public.devices SET tombstone_count = tombstone_count - 1 WHERE id = device;
                END IF;
            END IF;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER poop_logs_count_inserts ON poop_logs;
DROP TRIGGER poop_logs_count_deletes ON poop_logs;
DROP FUNCTION poop_logs_count_inserts();
DROP FUNCTION poop_logs_count_deletes();

-- The erasure's batches take their logs off the device's count (the row trigger leaves an erased device alone).
-- Replaced as the profile role, which owns it (0021, 0022).
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

CREATE OR REPLACE FUNCTION poopypals_erase_batch(p_device uuid, p_batch integer) RETURNS TABLE (removed bigint, remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    left_over bigint;
BEGIN
    DELETE FROM public.poop_logs l
    WHERE l.device_id = p_device
      AND l.id IN (SELECT b.id FROM public.poop_logs b WHERE b.device_id = p_device LIMIT p_batch);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF NOT EXISTS (SELECT FROM public.poop_logs l WHERE l.device_id = p_device) THEN
        DELETE FROM public.devices d WHERE d.id = p_device AND d.erasing_since IS NOT NULL;
        RETURN QUERY SELECT n, 0::bigint;
        RETURN;
    END IF;
    UPDATE public.devices d SET log_count = greatest(d.log_count - n, 1) WHERE d.id = p_device
    RETURNING d.log_count INTO left_over;
    RETURN QUERY SELECT n, coalesce(left_over, 1);
END
$$;

DO $$
BEGIN
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
