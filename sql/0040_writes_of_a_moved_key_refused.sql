-- A write that met a device key moved or stopped meanwhile is refused, never stored without its change number.
--
-- The log trigger (0038) numbers a log's change by updating its device's row under the request's key
-- (`devices`' policy: key = get_current_device_key()). A request checks its key in its context statement; the write
-- comes in a later statement. A rotation (or the start of an erasure) committed between the two, or while the write
-- waited for the device row's lock, left the update no row: the trigger then let the row through unnumbered, and
-- - an insert was stored with change_seq 0 when its policy still read the key map as the statement began (it had
--   waited for the lock): the phone was told 201, no sync carried the log, the device's log count missed it;
-- - an insert whose statement began after the move met its policy with the key standing for no device: 42501, a
--   500 to the phone (DataRightsTests, four writers during a rotation, make test's PostgreSQL 18 stage);
-- - a delete removed the row without its tombstone, a change was applied under the log's old change number: neither
--   reached the device's other phone.
-- Now such a row is refused in the trigger: PPD01 (sql/0030's "the kept id is out of date") when the key stands for
-- no device now, and the service, as for a stale kept id, looks the key up again and answers as for an unknown device
-- (409 device_not_registered, 404); 42501 as before when the row names another device. The profile role's erasure of
-- an erasing device's logs, and statements of a session with no device key, are as before. KeyChangeRaceTests.
--
-- The profile role is named in the function as a literal, as its policies name it (0028): a function that named it
-- by calling poopypals_profiles_role() failed on Citus's workers, where that function is not (42883).
--
-- Pre-deployment: the function's signature, and what it does to every write that succeeds, are unchanged; 1.0.0
-- (which has 0030) handles PPD01 as this release does: it forgets the kept id and looks the key up again.

DO $migration$
BEGIN
    EXECUTE replace($function$
CREATE OR REPLACE FUNCTION poop_logs_track_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst double precision := coalesce(nullif(current_setting('poopypals.device_write_burst', true), '')::double precision, 2000);
    rate double precision := coalesce(nullif(current_setting('poopypals.device_write_rate', true), '')::double precision, 20);
    slot constant text := current_setting('poopypals.device_slot', true);
    statement constant text := statement_timestamp()::text;
    parts text[];
    touched bigint;
    quota bigint;
    device uuid;
    seq bigint;
    tokens double precision;
    logs bigint;
    tombstones bigint;
    -- What the device row does not hold yet: changes numbered, logs and tombstones counted.
    pending_changes bigint := 0;
    pending_logs bigint := 0;
    pending_tombstones bigint := 0;
    -- Citus refuses a modification of a distributed table with a non-immutable function inside CASE or COALESCE
    -- ("non-IMMUTABLE functions are not allowed in CASE or COALESCE statements"): the time is a value here.
    at constant timestamptz := now();
    -- A simple CASE over TG_OP in the update itself reached the shard as "text = boolean" (Citus's deparsing of a
    -- CASE whose operand is a parameter): the changes to the counts are values too.
    log_change constant integer := CASE TG_OP WHEN 'INSERT' THEN 1 WHEN 'DELETE' THEN -1 ELSE 0 END;
    tombstone_change constant integer := CASE TG_OP WHEN 'DELETE' THEN 1 ELSE 0 END;
BEGIN
    device := CASE WHEN TG_OP = 'DELETE' THEN OLD.device_id ELSE NEW.device_id END;
    IF device IS NULL THEN
        RAISE EXCEPTION 'this device is not registered' USING ERRCODE = 'foreign_key_violation';
    END IF;
    parts := string_to_array(slot, '|');
    IF parts[2] = device::text AND parts[3] = statement THEN
        touched := pg_stat_get_xact_tuples_updated('public.devices'::regclass)
            + pg_stat_get_xact_tuples_deleted('public.devices'::regclass);
    END IF;
    IF parts[4] = touched::text THEN
        -- This statement numbered a change of this device already, and no device row changed since: its row is
        -- locked by this transaction, and holds what the slot says it holds.
        seq := parts[5]::bigint + 1;
        tokens := parts[6]::double precision - 1;
        logs := parts[7]::bigint + log_change;
        tombstones := parts[8]::bigint + tombstone_change;
        pending_changes := parts[9]::bigint + 1;
        pending_logs := parts[10]::bigint + log_change;
        pending_tombstones := parts[11]::bigint + tombstone_change;
    ELSE
        IF parts[1] = 'P' THEN
            -- Another device's rows came first in this statement: what its row lacks, written now.
            PERFORM set_config('poopypals.device_slot', '', true);
            UPDATE public.devices
            SET change_seq = change_seq + parts[9]::bigint,
                write_tokens = write_tokens - parts[9]::bigint,
                log_count = log_count + parts[10]::bigint,
                tombstone_count = tombstone_count + parts[11]::bigint
            WHERE id = parts[2]::uuid;
        END IF;
        UPDATE public.devices
        SET change_seq = change_seq + 1,
            write_tokens = least(burst, coalesce(write_tokens + greatest(0, extract(epoch FROM at - write_tokens_at)) * rate, burst)) - 1,
            write_tokens_at = at,
            log_count = log_count + log_change,
            tombstone_count = tombstone_count + tombstone_change
        WHERE id = device AND erasing_since IS NULL
        RETURNING change_seq, write_tokens, log_count, tombstone_count INTO seq, tokens, logs, tombstones;
        touched := pg_stat_get_xact_tuples_updated('public.devices'::regclass)
            + pg_stat_get_xact_tuples_deleted('public.devices'::regclass);
        -- No row of this device under the request's key to number the change by: the key moved (a rotation) or its
        -- device began to be erased after the request checked it, or the row names another device. The profile role's
        -- erasure of an erasing device's logs, and a session with no device key (an operator's), are not numbered.
        IF seq IS NULL AND public.get_current_device_key() IS NOT NULL
           AND current_user OPERATOR(pg_catalog.<>) @profiles_role@::name THEN
            -- A new snapshot (this function is volatile): the key as it stands now.
            IF public.get_current_device_id() IS NULL THEN
                RAISE EXCEPTION 'the device id kept for this key is out of date: the key stands for no device now'
                    USING ERRCODE = 'PPD01';
            END IF;
            RAISE EXCEPTION 'new row violates row-level security policy for table "poop_logs"'
                USING ERRCODE = 'insufficient_privilege', DETAIL = 'The row names a device other than the request''s.';
        END IF;
    END IF;
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
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = at;
            PERFORM set_config('poopypals.device_slot', concat_ws('|',
                CASE WHEN pending_changes = 0 AND pending_logs = 0 AND pending_tombstones = 0 THEN 'C' ELSE 'P' END,
                device, statement, touched, seq, tokens, logs, tombstones, pending_changes, pending_logs, pending_tombstones), true);
        END IF;
        RETURN OLD;
    END IF;
    -- A session with no device key (an operator's, which row-level security then refuses or, a superuser, lets pass).
    NEW.change_seq := coalesce(seq, NEW.change_seq, 0);
    IF seq IS NULL THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- A new snapshot, taken after the device row's lock: every insert of this device that committed before
        -- is seen here, so a log that ON CONFLICT will skip is known for what it is.
        IF EXISTS (SELECT 1 FROM public.poop_logs l WHERE l.device_id = device AND l.id = NEW.id) THEN
            logs := logs - 1;
            pending_logs := pending_logs - 1;
        ELSE
            quota := coalesce(nullif(current_setting('poopypals.max_logs_per_device', true), '')::bigint, 100000);
            IF logs > quota THEN
                RAISE EXCEPTION 'a device may hold at most % logs', quota USING ERRCODE = 'PPQ01';
            END IF;
            IF tombstones > 0 THEN
                DELETE FROM public.poop_log_tombstones t WHERE t.device_id = device AND t.id = NEW.id;
                IF FOUND THEN
                    tombstones := tombstones - 1;
                    pending_tombstones := pending_tombstones - 1;
                END IF;
            END IF;
        END IF;
    END IF;
    PERFORM set_config('poopypals.device_slot', concat_ws('|',
        CASE WHEN pending_changes = 0 AND pending_logs = 0 AND pending_tombstones = 0 THEN 'C' ELSE 'P' END,
        device, statement, touched, seq, tokens, logs, tombstones, pending_changes, pending_logs, pending_tombstones), true);
    RETURN NEW;
END
$$;
$function$, '@profiles_role@', pg_catalog.quote_literal(poopypals_profiles_role()));
END
$migration$;
