-- Issue 45 (docs/scaling.md, "Sharding by device"): the statements of our functions and of the log trigger in forms
-- Citus runs on distributed tables. Found by distributing a migrated database by hand (2026-11-27):
--
-- - `EXISTS (SELECT FROM t …)`, a sub-select with no column, on a distributed table that Citus plans in two steps (a
--   filter without the distribution column: registration's "a device being erased has this key") fails: "a column
--   definition list is required for functions returning record" (its intermediate result has no column). With
--   `SELECT 1` it runs. Every PL/pgSQL function of the schema is rewritten so, by its owner (a DO block below: the
--   same text with `(SELECT 1 FROM` for `(SELECT FROM`, nothing else; the functions keep their owners, grants and
--   settings, since CREATE OR REPLACE keeps them).
-- - The log trigger's update of its device computed the write bucket with now() inside COALESCE, which Citus
--   refuses in a modification of a distributed table ("non-IMMUTABLE functions are not allowed in CASE or COALESCE
--   statements"): the time is taken once into a variable. The same value as before (now() is the transaction's
--   start on one PostgreSQL; on Citus, the worker's). Its simple CASE over TG_OP reached the shard as
--   "operator does not exist: text = boolean": the count changes are variables too.
-- - Erasure set erasing_since to clock_timestamp() in its update, and Citus refuses a volatile function in an update
--   of a distributed table ("functions used in UPDATE queries on distributed tables must not be VOLATILE"): taken
--   into a variable first.
-- - The profile function's insert of a user was refused on the reference table's shards ("permission denied for
--   table users_102008"): Citus sends every column to a shard, defaulted ones included, and the profile role's
--   INSERT grant named four. It gets INSERT on the table (it is the role of our own functions only; the service
--   role's grants are unchanged).
-- - Rows locked by a query over every shard: Citus refuses ("could not run distributed query with FOR UPDATE/SHARE
--   commands"). The erasure of a device found by its key, the erasure by email and the background erasure lock
--   each device by its id (after finding it without a lock), as the other functions already did.
-- - The registration token's upsert used now() in DO UPDATE, where Citus takes immutable functions only: a value.
-- - Registration and rotation answered their outcome by a left join of devices on `d.id = device`, also when there
--   was no device (a key being erased registering again): on Citus that crashed the coordinator (signal 11,
--   every session lost; by hand, 2026-11-27). A client could do it at will. Each now reads its device by id only
--   when it has one, and answers NULLs itself otherwise.
-- - get_current_device_key() answered NULL for an empty app.device_id by a CASE, inlined into each policy. Citus
--   evaluates such an expression's parts before sending a statement to a shard, the guarded cast included: the
--   background erasure (no device, and the setting empty after an earlier request on the connection) failed on
--   the log trigger's update with "invalid input syntax for type uuid". NULLIF instead: no branch to skip.
-- - Also here (one PostgreSQL too): registration, rotation and erasure lock or update the device found through the
--   map only while it still has the request's key (a rotation that committed meanwhile leaves the old key
--   unknown, as 0021's lookups by key did; found in review), and erasure by email deletes the devices it locked,
--   by id.
-- Otherwise nothing here changes what a statement does on one PostgreSQL, except that the background erasure looks
-- at the 16 oldest erasures for one no other worker holds (it took any before), and an erasure's start time is read
-- when its function starts (before its lock waits, where clock_timestamp() was read after them).

DO $$
DECLARE
    r record;
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    FOR r IN SELECT p.oid, pg_get_userbyid(p.proowner) AS owner
             FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
             WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'plpgsql' AND p.prosrc LIKE '%(SELECT FROM %'
             ORDER BY p.oid LOOP
        IF r.owner <> current_user THEN
            PERFORM set_config('role', r.owner, true);
        END IF;
        EXECUTE replace(pg_get_functiondef(r.oid), '(SELECT FROM ', '(SELECT 1 FROM ');
        PERFORM set_config('role', 'none', true);
    END LOOP;
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT INSERT ON users TO %I', poopypals_profiles_role());
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- 0027's erasure, with the time in a variable.
CREATE OR REPLACE FUNCTION poopypals_erase_device(p_subject uuid, p_batch integer)
    RETURNS TABLE (erased boolean, logs bigint, profile_erased boolean, logs_remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    device_key constant uuid := public.get_current_device_key();
    live uuid;
    device public.devices%ROWTYPE;
    profile_gone boolean := false;
    n bigint;
    left_over bigint;
    -- Citus refuses a volatile function in an update of a distributed table: the time is a value.
    stopped_at constant timestamptz := clock_timestamp();
BEGIN
    IF device_key IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'the batch must hold at least one log' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The device row first: its link cannot change under us (linking locks it too), and of two devices of one
    -- profile erased at once the second waits for the profile row and then sees the first one unlinked.
    SELECT m.id INTO live FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) device_key;
    IF NOT FOUND THEN
        -- Being erased: found by its key first, then locked by its id (Citus locks no row of a query over every
        -- shard: "could not run distributed query with FOR UPDATE/SHARE commands").
        SELECT d.id INTO live FROM public.devices d WHERE d.key = device_key;
    END IF;
    -- Still under this key (the lock re-reads the row: a rotation that committed meanwhile moved it away).
    SELECT * INTO device FROM public.devices d WHERE d.id = live AND d.key = device_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false, 0::bigint;
        RETURN;
    END IF;
    IF device.erasing_since IS NULL THEN
        IF device.user_id IS NOT NULL THEN
            PERFORM FROM public.users u WHERE u.id = device.user_id FOR UPDATE;
        END IF;
        UPDATE public.devices d SET erasing_since = stopped_at, user_id = NULL WHERE d.id = device.id;
        DELETE FROM public.device_key_map m WHERE m.id = device.id;
        IF device.user_id IS NOT NULL AND device.user_id = p_subject
           AND NOT EXISTS (SELECT 1 FROM public.devices d WHERE d.user_id = device.user_id) THEN
            DELETE FROM public.users u WHERE u.id = device.user_id;
            profile_gone := FOUND;
        END IF;
    END IF;
    SELECT b.removed, b.remaining INTO n, left_over FROM public.poopypals_erase_batch(device.id, p_batch) b;
    RETURN QUERY SELECT true, n, profile_gone, left_over;
END
$$;

DO $$
BEGIN
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- 0027's registration token, with the time in a variable.
CREATE OR REPLACE FUNCTION poopypals_take_registration(p_network text, p_burst double precision, p_rate double precision) RETURNS void
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst constant double precision := coalesce(p_burst, 30);
    rate constant double precision := coalesce(p_rate, 1.0 / 30);
    left_over double precision;
    -- Citus takes only immutable functions in an upsert's DO UPDATE: the time is a value.
    at constant timestamptz := now();
BEGIN
    IF coalesce(p_network, '') = '' THEN
        RETURN;
    END IF;
    INSERT INTO public.registration_buckets AS b (network, tokens, refilled_at) VALUES (decode(p_network, 'hex'), burst - 1, at)
    ON CONFLICT (network) DO UPDATE
        SET tokens = least(burst, b.tokens + greatest(0, extract(epoch FROM at - b.refilled_at)) * rate) - 1,
            refilled_at = at
    RETURNING b.tokens INTO left_over;
    IF left_over < 0 THEN
        RAISE EXCEPTION 'too many devices registered from this network' USING ERRCODE = 'PPR02',
            DETAIL = ceil(-left_over / greatest(rate, 0.0000001))::bigint::text;
    END IF;
END
$$;

-- 0027's registration and rotation, reading their device only when they have one.
CREATE OR REPLACE FUNCTION poopypals_register_device(
    p_model text, p_os_version text, p_app_version text, p_build_number text, p_is_simulator boolean,
    p_create boolean, p_network text, p_burst double precision, p_rate double precision
) RETURNS TABLE (
    outcome text, user_id uuid, model text, os_version text, app_version text, build_number text,
    is_simulator boolean, created_at timestamptz, last_seen_at timestamptz
)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    device_key constant uuid := public.get_current_device_key();
    device uuid;
    result text;
BEGIN
    IF device_key IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A pass is repeated only when a concurrent change of this key committed between its lookup and its write: a
    -- registration that took the map row first, or a rotation or an erasure of the device it found.
    FOR attempt IN 1..3 LOOP
        SELECT m.id INTO device FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) device_key;
        IF FOUND THEN
            -- Still this key's device, and not being erased: the update re-reads a row another transaction changed,
            -- so a rotation away from this key or an erasure that committed meanwhile leaves nothing to update.
            UPDATE public.devices d SET model = p_model, os_version = p_os_version, app_version = p_app_version,
                build_number = p_build_number, is_simulator = p_is_simulator, last_seen_at = now()
            WHERE d.id = device AND d.key = device_key AND d.erasing_since IS NULL;
            IF FOUND THEN
                result := 'updated';
                EXIT;
            END IF;
            -- Moved or erased since the lookup: the next pass finds what the key is now (unknown: a new device;
            -- being erased: said so).
            device := NULL;
            CONTINUE;
        ELSIF NOT p_create THEN
            result := 'not_registered';
            EXIT;
        ELSIF EXISTS (SELECT 1 FROM public.devices d WHERE d.key OPERATOR(pg_catalog.=) device_key AND d.erasing_since IS NOT NULL) THEN
            -- Not in the map but a device: its erasure is under way. (A live device found here was registered by a
            -- concurrent call that committed since the lookup above: its map row stops the insert below.)
            result := 'being_erased';
            EXIT;
        END IF;
        BEGIN
            INSERT INTO public.device_key_map (key, id) VALUES (device_key, gen_random_uuid())
            ON CONFLICT (key) DO NOTHING
            RETURNING id INTO device;
            IF FOUND THEN
                PERFORM public.poopypals_take_registration(p_network, p_burst, p_rate);
                INSERT INTO public.devices (id, key, model, os_version, app_version, build_number, is_simulator)
                VALUES (device, device_key, p_model, p_os_version, p_app_version, p_build_number, p_is_simulator);
                result := 'created';
                EXIT;
            END IF;
        EXCEPTION WHEN unique_violation THEN
            -- devices.key (one PostgreSQL): the key's device began its erasure since the check above, and still
            -- holds the key. The map row and the token go back with this block.
            result := 'being_erased';
            EXIT;
        END;
    END LOOP;
    IF result IS NULL THEN
        -- Three passes each overtaken by another change of this key: the request is retried whole.
        RAISE EXCEPTION 'the registration raced other changes of this key' USING ERRCODE = 'serialization_failure';
    END IF;
    -- No join of devices on a condition that may hold no id: on Citus that crashed the coordinator (signal 11).
    IF result IN ('created', 'updated') THEN
        RETURN QUERY SELECT result, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                            d.is_simulator, d.created_at, d.last_seen_at
                     FROM public.devices d WHERE d.id = device;
    ELSE
        RETURN QUERY SELECT result, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::text,
                            NULL::boolean, NULL::timestamptz, NULL::timestamptz;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION poopypals_rotate_device(p_new_key uuid) RETURNS TABLE (
    outcome text, id uuid, user_id uuid, model text, os_version text, app_version text, build_number text,
    is_simulator boolean, created_at timestamptz, last_seen_at timestamptz
)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    device_key constant uuid := public.get_current_device_key();
    device uuid;
    result text := 'rotated';
BEGIN
    IF device_key IS NULL OR p_new_key IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT m.id INTO device FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) device_key;
    IF FOUND THEN
        -- Locked first, as erasure locks it.
        -- Still under this key: a rotation or an erasure that committed meanwhile (the lock re-reads the row)
        -- leaves the key unknown, as it is to every later request.
        PERFORM FROM public.devices d WHERE d.id = device AND d.key = device_key AND d.erasing_since IS NULL FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        result := 'not_registered';
    ELSIF p_new_key = device_key
          OR EXISTS (SELECT 1 FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) p_new_key)
          OR EXISTS (SELECT 1 FROM public.devices d WHERE d.key = p_new_key) THEN
        result := 'in_use';
    ELSE
        BEGIN
            UPDATE public.device_key_map m SET key = p_new_key WHERE m.id = device AND m.key OPERATOR(pg_catalog.=) device_key;
            IF NOT FOUND THEN
                -- Moved by a concurrent rotation of the same key since the lookup, which then committed.
                RAISE EXCEPTION USING ERRCODE = 'unique_violation';
            END IF;
            UPDATE public.devices d SET key = p_new_key, last_seen_at = now() WHERE d.id = device;
        EXCEPTION WHEN unique_violation THEN
            -- Registered or rotated to by a concurrent transaction since the check above.
            result := 'in_use';
        END;
    END IF;
    -- One row: the outcome, with the device under its new key when it moved (NULLs otherwise).
    -- No join of devices on a condition that may hold no id: on Citus that crashed the coordinator (signal 11).
    IF result = 'rotated' THEN
        RETURN QUERY SELECT result, d.key, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                            d.is_simulator, d.created_at, d.last_seen_at
                     FROM public.devices d WHERE d.id = device;
    ELSE
        RETURN QUERY SELECT result, NULL::uuid, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::text,
                            NULL::boolean, NULL::timestamptz, NULL::timestamptz;
    END IF;
END
$$;

-- 0021's background erasure and 0027's erasure by email, each device locked by its id.
CREATE OR REPLACE FUNCTION poopypals_erase_pending(p_batch integer) RETURNS TABLE (erasing bigint, logs bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target uuid;
    candidate uuid;
    n bigint := 0;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'the batch must hold at least one log' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The oldest erasures first, each locked by its id (Citus locks no row of a query over every shard: "could not
    -- run distributed query with FOR UPDATE/SHARE commands"); one another worker holds is skipped.
    FOR candidate IN SELECT d.id FROM public.devices d WHERE d.erasing_since IS NOT NULL ORDER BY d.erasing_since LIMIT 16 LOOP
        SELECT d.id INTO target FROM public.devices d WHERE d.id = candidate AND d.erasing_since IS NOT NULL FOR UPDATE SKIP LOCKED;
        EXIT WHEN FOUND;
    END LOOP;
    IF target IS NOT NULL THEN
        SELECT b.removed INTO n FROM public.poopypals_erase_batch(target, p_batch) b;
    END IF;
    RETURN QUERY SELECT (SELECT count(*) FROM public.devices d WHERE d.erasing_since IS NOT NULL), n;
END
$$;

CREATE OR REPLACE FUNCTION poopypals_erase_user(p_email text, p_dry_run boolean)
    RETURNS TABLE (users integer, devices integer, logs bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target uuid;
    device_count integer;
    log_count bigint;
    device uuid;
    ids uuid[] := '{}';
BEGIN
    SELECT u.id INTO target FROM public.users u WHERE u.email = lower(btrim(p_email));
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0, 0::bigint;
        RETURN;
    END IF;
    -- Devices first, then the profile: the order the device functions lock in, so that they cannot deadlock.
    -- Each locked by its id: Citus locks no row of a query over every shard.
    FOR device IN SELECT d.id FROM public.devices d WHERE d.user_id = target ORDER BY d.id LOOP
        PERFORM FROM public.devices d WHERE d.id = device AND d.user_id = target FOR UPDATE;
        IF FOUND THEN
            ids := ids || device;
        END IF;
    END LOOP;
    PERFORM FROM public.users u WHERE u.id = target FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0, 0::bigint;
        RETURN;
    END IF;
    -- The devices locked above, by their ids: on Citus a reference table (the map) is not written from a
    -- sub-select over a distributed one, and each id names its shard.
    SELECT count(*)::integer, coalesce(sum(d.log_count), 0)::bigint INTO device_count, log_count
    FROM public.devices d WHERE d.id = ANY (ids);
    IF NOT p_dry_run THEN
        DELETE FROM public.device_key_map m WHERE m.id = ANY (ids);
        DELETE FROM public.devices d WHERE d.id = ANY (ids);
        DELETE FROM public.users u WHERE u.id = target;
    END IF;
    RETURN QUERY SELECT 1, device_count, log_count;
END
$$;

DO $$
BEGIN
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;

-- 0023's key, with NULLIF for the empty setting (still inlined: one SQL expression). NULLIF's equality is the
-- caller's search_path's text "=", which is pg_catalog's unless the session puts another schema before it; no role
-- of ours can create an operator (no CREATE on any schema), and the service sets no search_path.
CREATE OR REPLACE FUNCTION get_current_device_key() RETURNS uuid
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
AS $$
    SELECT NULLIF(pg_catalog.current_setting('app.device_id', true), '')::pg_catalog.uuid
$$;

-- 0024's trigger, with the time in a variable.
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
    UPDATE public.devices
    SET change_seq = change_seq + 1,
        write_tokens = least(burst, coalesce(write_tokens + greatest(0, extract(epoch FROM at - write_tokens_at)) * rate, burst)) - 1,
        write_tokens_at = at,
        log_count = log_count + log_change,
        tombstone_count = tombstone_count + tombstone_change
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
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = at;
        END IF;
        RETURN OLD;
    END IF;
    -- Not the calling device's row: leave it as it is, and let row-level security (42501) refuse it.
    NEW.change_seq := coalesce(seq, NEW.change_seq, 0);
    IF TG_OP = 'INSERT' AND seq IS NOT NULL THEN
        -- A new snapshot, taken after the device row's lock: every insert of this device that committed before
        -- is seen here, so a log that ON CONFLICT will skip is known for what it is.
        IF EXISTS (SELECT 1 FROM public.poop_logs l WHERE l.device_id = device AND l.id = NEW.id) THEN
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
