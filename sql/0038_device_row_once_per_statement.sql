-- Issue 57: the rows of one device in one statement update its device row once, not once per row.
--
-- Since 0024 the log trigger updates the device row for every log row it numbers (change number, write bucket,
-- log and tombstone counts). Within one statement those updates are versions of one row by one transaction: none
-- can be pruned, and each update finds the row's newest version by walking the chain of the ones before it. So
-- the rows of one device in one statement cost time quadratic in their number (measured 2026-11-28: 16 000 rows
-- of one device 8.8x what 4 000 cost to insert, 9.1x to delete; 100 000 in one INSERT … SELECT did not finish in
-- 15 minutes).
--
-- Now the first row of a device in a statement updates the device row as before (the lock that orders the
-- device's changes is taken there, and held until the transaction ends), and the trigger keeps what that update
-- returned in a transaction-local setting, `poopypals.device_slot`: the device, the statement (its start,
-- statement_timestamp(), which each message a client sends sets anew), how many device rows this transaction had
-- updated or deleted (pg_stat_get_xact_tuples_updated/deleted: statements sent in one message, or run by one
-- function, share a start, and one of them may change the device row between two others: an erasure's), its change
-- number, tokens, log and tombstone counts as they now are, and what of them the row does not hold yet. The next rows of the same device in the same statement, with no other update of a device row since, take their
-- numbers from it: with the
-- row locked by this transaction nothing else numbers the device's changes, and the write bucket gains nothing
-- between rows (its time is now(), the transaction's). A statement that left the row behind ("P", pending) has it
-- written in one update by a statement trigger at its end, which empties the slot; so does a row of another device
-- (a statement over several devices updates each device row once per run of its rows). The replay of a create (a
-- log that ON CONFLICT then skips) and the return of a deleted id take their count back in the slot too, where
-- they made a second update before. A statement of one row leaves nothing pending: its statement trigger is not
-- called (the trigger's WHEN reads the slot; measured, a call of it on every create cost ~90 µs a transaction).
--
-- The delete trigger numbers a log before its row goes (BEFORE DELETE; it was AFTER): a statement trigger's WHEN
-- is read before the statement's AFTER row triggers run, so it could not see what they left. A BEFORE DELETE
-- trigger runs for a row the statement has locked and will delete (a row another transaction deleted first is
-- skipped before it, as before); the tombstone is written before the row goes, in the same statement.
--
-- What a statement does is unchanged: the same change numbers in the same order (sync's cursor never skips one),
-- the same counts, quotas (PPQ01, PPQ02), bucket (PPR01) and tombstones, and the same refusals of another device's
-- rows. A statement that fails leaves nothing: the slot is a setting of the transaction, undone with it (and with a
-- subtransaction). The previous release sends the same statements and sees the same results. On Citus the
-- triggers are on every shard, as the row triggers were (0031): a shard's statement uses the slot of the worker's
-- session it runs in.

CREATE OR REPLACE FUNCTION poop_logs_flush_changes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- P, device, statement, device rows touched, change number, tokens, logs, tombstones as they are; then the
    -- changes, logs and tombstones the device row lacks.
    parts constant text[] := string_to_array(current_setting('poopypals.device_slot', true), '|');
BEGIN
    PERFORM set_config('poopypals.device_slot', '', true);
    IF parts[1] = 'P' THEN
        UPDATE public.devices
        SET change_seq = change_seq + parts[9]::bigint,
            write_tokens = write_tokens - parts[9]::bigint,
            log_count = log_count + parts[10]::bigint,
            tombstone_count = tombstone_count + parts[11]::bigint
        WHERE id = parts[2]::uuid;
    END IF;
    RETURN NULL;
END
$$;

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
    -- Not the calling device's row: leave it as it is, and let row-level security (42501) refuse it.
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

DO $$
BEGIN
    -- On a distributed poop_logs Citus creates the triggers on its shards only when told to (0031).
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    END IF;
END
$$;

-- The delete trigger runs before its row goes (see above).
DROP TRIGGER poop_logs_track_change_delete ON poop_logs;
CREATE TRIGGER poop_logs_track_change_delete BEFORE DELETE ON poop_logs
    FOR EACH ROW EXECUTE FUNCTION poop_logs_track_change();
CREATE TRIGGER poop_logs_flush_changes AFTER INSERT OR UPDATE OR DELETE ON poop_logs
    FOR EACH STATEMENT WHEN (current_setting('poopypals.device_slot', true) LIKE 'P%')
    EXECUTE FUNCTION poop_logs_flush_changes();
