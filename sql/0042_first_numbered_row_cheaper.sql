-- Issue 57: the log trigger's work for a transaction's first numbered row, cheaper; nothing it does changes.
--
-- The trigger (0038, 0041) ran the same steps for every row. A request's write is usually a transaction's only
-- numbered row, and three of those steps cost more than they did for it (callgrind, PostgreSQL 15, the create
-- transaction as `serve` sends it, instructions of the backend per transaction):
-- - `PERFORM set_config(…)` runs its expression as a query (an executor started and ended, about 15 000
--   instructions); an assignment evaluates it as a simple expression. Twice per row: 1 218 k -> 1 187 k.
-- - With no slot in the transaction nothing is parked (the slot is '' only when nothing is, and both settings are
--   transaction-local): the parked list is neither read, searched nor written back, and the setting is written only
--   when the list changed. 1 187 k -> 1 127 k.
-- - The test that tells a moved key from another device's row is compiled (once a transaction, as every expression
--   of a PL/pgSQL function) only when a row goes unnumbered. 1 127 k -> 1 120 k.
-- The same numbers, counts, bucket, quotas, tombstones and refusals (DeviceCountTests, KeyChangeRaceTests, the
-- quota and sync suites). Pre-deployment: only poop_logs_track_change() is replaced, with its signature; the
-- previous release sends the same statements and sees the same results.

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
    -- What set_config returns. An assignment is a simple expression; PERFORM would run it as a query (an executor
    -- started and ended: about 15 000 instructions a call).
    written text;
    -- The parked devices as the statement found them: the setting is written only when they change.
    parked_before text;
    statement constant text := statement_timestamp()::text;
    parts text[];
    parked text;
    entry text;
    place integer;
    -- Devices (as parked: device|number|tokens|logs|tombstones|what the row lacks;) whose rows get what they lack now.
    lacking text := '';
    -- Whether the statement trigger must write what device rows lack at the statement's end: devices are parked.
    due boolean := false;
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
    IF parts[3] = statement THEN
        touched := pg_stat_get_xact_tuples_updated('public.devices'::regclass)
            + pg_stat_get_xact_tuples_deleted('public.devices'::regclass);
    END IF;
    IF parts[2] = device::text AND parts[4] = touched::text THEN
        -- This statement numbered a change of this device already, and no device row changed since: its row is
        -- locked by this transaction, and holds what the slot says it holds.
        -- A device parked by this statement keeps the statement trigger due (the slot's P says so).
        due := parts[1] = 'P';
        seq := parts[5]::bigint + 1;
        tokens := parts[6]::double precision - 1;
        logs := parts[7]::bigint + log_change;
        tombstones := parts[8]::bigint + tombstone_change;
        pending_changes := parts[9]::bigint + 1;
        pending_logs := parts[10]::bigint + log_change;
        pending_tombstones := parts[11]::bigint + tombstone_change;
    ELSE
        -- With no slot in this transaction (its first numbered row, or after the statement trigger cleared it),
        -- nothing is parked either (the slot is '' only when nothing is): nothing to write, park or take back.
        IF slot <> '' THEN
            parked := coalesce(current_setting('poopypals.devices_parked', true), '');
            parked_before := parked;
            IF parts[4] = touched::text THEN
                -- This statement's slot, and no device row changed since: the slot's device is parked, the most recent
                -- first, and this device taken back if it was parked (its row locked by this transaction, holding what
                -- its entry says it holds).
                IF parts[2] <> '' THEN
                    parked := concat_ws('|', parts[2], parts[5], parts[6], parts[7], parts[8], parts[9], parts[10], parts[11]) || ';' || parked;
                    IF length(parked) > 1200 THEN
                        -- About a dozen are parked (an entry is about 100 characters, and each switch copies the list):
                        -- the least recent, the last, gets what its row lacks (below) and is forgotten.
                        lacking := reverse(split_part(reverse(parked), ';', 2));
                        parked := left(parked, -length(lacking) - 1);
                    END IF;
                END IF;
                place := strpos(parked, device::text);
                IF place > 0 THEN
                    entry := split_part(substr(parked, place), ';', 1);
                    parked := overlay(parked PLACING '' FROM place FOR length(entry) + 1);
                    parts := string_to_array(entry, '|');
                    seq := parts[2]::bigint + 1;
                    tokens := parts[3]::double precision - 1;
                    logs := parts[4]::bigint + log_change;
                    tombstones := parts[5]::bigint + tombstone_change;
                    pending_changes := parts[6]::bigint + 1;
                    pending_logs := parts[7]::bigint + log_change;
                    pending_tombstones := parts[8]::bigint + tombstone_change;
                END IF;
            ELSE
                -- Another statement's slot, or a device row changed since (a statement sharing this one's start, a
                -- function's): what the slot's and the parked devices' rows lack is written now (below), and they are
                -- forgotten.
                IF parts[2] <> '' THEN
                    lacking := concat_ws('|', parts[2], parts[5], parts[6], parts[7], parts[8], parts[9], parts[10], parts[11]) || ';';
                END IF;
                lacking := lacking || parked;
                parked := '';
            END IF;
            IF lacking <> '' THEN
                FOREACH entry IN ARRAY string_to_array(rtrim(lacking, ';'), ';') LOOP
                    parts := string_to_array(entry, '|');
                    IF parts[6] <> '0' OR parts[7] <> '0' OR parts[8] <> '0' THEN
                        UPDATE public.devices
                        SET change_seq = change_seq + parts[6]::bigint,
                            write_tokens = write_tokens - parts[6]::bigint,
                            log_count = log_count + parts[7]::bigint,
                            tombstone_count = tombstone_count + parts[8]::bigint
                        WHERE id = parts[1]::uuid;
                    END IF;
                END LOOP;
            END IF;
            IF parked <> parked_before THEN
                written := set_config('poopypals.devices_parked', parked, true);
            END IF;
            due := parked <> '';
        END IF;
        IF seq IS NULL THEN
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
            IF seq IS NULL THEN
                -- The row goes unnumbered (or is refused below): the slot names no device now, and parked devices
                -- keep the statement trigger due. (A numbered row writes the slot below.)
                written := set_config('poopypals.device_slot',
                    CASE WHEN due THEN concat_ws('|', 'P', '', statement, touched) ELSE '' END, true);
            END IF;
        END IF;
        -- No row of this device under the request's key to number the change by: the key moved (a rotation) or its
        -- device began to be erased after the request checked it, or the row names another device. The profile role's
        -- erasure of an erasing device's logs, and a session with no device key (an operator's), are not numbered.
        IF seq IS NOT NULL THEN
            NULL;  -- numbered: the test below is compiled (once a transaction) only when a row goes unnumbered
        ELSIF public.get_current_device_key() IS NOT NULL
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
            written := set_config('poopypals.device_slot', concat_ws('|',
                CASE WHEN pending_changes = 0 AND pending_logs = 0 AND pending_tombstones = 0 AND NOT due THEN 'C' ELSE 'P' END,
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
    written := set_config('poopypals.device_slot', concat_ws('|',
        CASE WHEN pending_changes = 0 AND pending_logs = 0 AND pending_tombstones = 0 AND NOT due THEN 'C' ELSE 'P' END,
        device, statement, touched, seq, tokens, logs, tombstones, pending_changes, pending_logs, pending_tombstones), true);
    RETURN NEW;
END
$$;
$function$, '@profiles_role@', pg_catalog.quote_literal(poopypals_profiles_role()));
END
$migration$;
