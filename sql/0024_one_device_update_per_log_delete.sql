-- One update of the device row per log deleted (issue 44). Since 0014 every log insert and delete updated its
-- device's row twice: the row trigger (change number, write tokens), then a statement trigger with a transition
-- table (log and tombstone counts, quotas). The second update is a second version of the same row in the same
-- transaction, so the foreign key of devices.user_id is checked again (a FOR KEY SHARE lock on the profile row),
-- and the statement trigger's PL/pgSQL and transition-table query cost about as much as the write itself
-- (pgbench, the create transaction, 8 clients: 2 399 tps with the insert's statement trigger, 5 740 without).
--
-- Deletes: the row trigger (AFTER DELETE: it fires for rows really deleted) now takes log_count - 1 and
-- tombstone_count + 1 in the update that takes the change number, and applies the tombstone quota (PPQ02) to
-- what that update returns. poop_logs_count_deletes is dropped. A device being erased is not updated (as in
-- 0021): poopypals_erase_batch takes its deleted logs off log_count once per batch.
--
-- Inserts keep 0023's statement trigger (poop_logs_count_inserts). Counting in the row trigger needs to know
-- whether ON CONFLICT DO NOTHING will skip the row (a create's replay), and the way tried, a look for the log
-- after the device lock, is a query under row-level security inside the trigger; any such query there cost about
-- 300 µs of PostgreSQL's CPU per insert (pgbench: 2 600-2 950 tps with it, 5 270 without; the same look at a
-- copy of the table without row-level security cost about 40 µs), more than the statement trigger it replaced.

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
        log_count = log_count - CASE TG_OP WHEN 'DELETE' THEN 1 ELSE 0 END,
        tombstone_count = tombstone_count + CASE TG_OP WHEN 'DELETE' THEN 1 ELSE 0 END
    WHERE id = device AND erasing_since IS NULL
    RETURNING change_seq, write_tokens, tombstone_count INTO seq, tokens, tombstones;
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
    RETURN NEW;
END
$$;

DROP TRIGGER poop_logs_count_deletes ON poop_logs;
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
