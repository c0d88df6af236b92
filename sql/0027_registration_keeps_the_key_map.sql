-- Issue 45, the writes of the key map (docs/scaling.md, "Sharding by device"): the functions that register, rotate
-- and erase a device write device_key_map themselves, and no trigger on devices writes another table any more.
--
-- Why: on Citus, devices will be distributed (a shard per slice of devices, on the workers) and the map a reference
-- table (a copy on every node). A trigger on devices runs on the worker that holds the device's shard, and its write
-- to the map is a distributed query from a query on a shard: refused, or with citus.allow_nested_distributed_execution
-- it crashed both workers at COMMIT PREPARED and left the map's copies disagreeing (measured, docs/scaling.md). The
-- same holds for registration_buckets, written by the registration trigger of 0015. A function the coordinator runs
-- writes the map, the bucket and the device in one distributed transaction (CitusTests,
-- theKeyMapWrittenFromTheCoordinatorAgreesOnEveryNode). The same functions serve one PostgreSQL: one code path.
--
-- - Registration becomes poopypals_register_device, as the profile role (SECURITY DEFINER, as rotation and erasure).
--   It finds the device by the map (a key's row there is the device's id), not by devices.key: on Citus devices
--   cannot keep a unique key that is not its distribution column, so "INSERT … ON CONFLICT (key)" has no future.
--   A new key takes its map row first (the map's primary key orders two registrations of one key: the second
--   waits, then finds the first and updates it), then the network's registration token, then the device row. The
--   service role no longer inserts or deletes devices, nor keeps the buckets: only the profile role's functions do.
-- - Rotation moves the map row to the new key; erasure deletes it when the erasure starts (the device is from then
--   on unknown to every request, as before); erasure by email deletes the rows of the person's devices.
-- - The triggers devices_keep_key_map (0026) and devices_take_registration (0015) are dropped.
--
-- What a request sees does not change: the same outcomes, errors and SQLSTATEs (the bucket's PPR02 with its wait in
-- DETAIL; 42501 without a device). One thing does: a device being erased whose key registers again is answered
-- "being erased" by the function itself, where PostgreSQL's patched upsert (CVE-2026-120154) raised 42501 that the
-- service then told apart with a second transaction. The service role loses INSERT and DELETE on devices: a running
-- service of an earlier version registers no device from then on (upgrade the binary with it, as for 0022).
--
-- Devices are locked against writes until this transaction commits, so no registration runs between the triggers'
-- removal and the functions' arrival (the migrator's lock timeout and retry bound the wait).

LOCK TABLE devices IN SHARE ROW EXCLUSIVE MODE;

DROP TRIGGER devices_keep_key_map ON devices;
DROP TRIGGER devices_take_registration ON devices;
DROP FUNCTION devices_take_registration();

-- The profile role registers devices now: it inserts them (every column: on Citus a shard receives each defaulted
-- column as an explicit value, and a column-level grant that leaves one out is refused there), updates what a
-- registration changes, and keeps the buckets and the map's keys. The service role gives up those writes.
DO $$
DECLARE
    profiles constant text := poopypals_profiles_role();
    app constant text := poopypals_service_role();
BEGIN
    EXECUTE format('GRANT INSERT ON devices TO %I', profiles);
    EXECUTE format('GRANT UPDATE (model, os_version, app_version, build_number, is_simulator) ON devices TO %I', profiles);
    EXECUTE format('CREATE POLICY "Profiles can register devices" ON devices FOR INSERT TO %I WITH CHECK (current_user = %L)',
                   profiles, profiles);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON registration_buckets TO %I', profiles);
    EXECUTE format('GRANT UPDATE (key) ON device_key_map TO %I', profiles);
    EXECUTE format('REVOKE INSERT ON devices FROM %I', app);
    EXECUTE format('REVOKE INSERT (key, model, os_version, app_version, build_number, is_simulator) ON devices FROM %I', app);
    EXECUTE format('REVOKE UPDATE (model, os_version, app_version, build_number, is_simulator) ON devices FROM %I', app);
    EXECUTE format('REVOKE ALL ON registration_buckets FROM %I', app);
    -- A device row goes only with its map row, by erasure: a delete of it alone would leave its key in the map.
    EXECUTE format('REVOKE DELETE ON devices FROM %I', app);
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', profiles);
    PERFORM set_config('role', profiles, true);
END
$$;

DROP FUNCTION devices_keep_key_map();

-- One token of the network's registration bucket (0015's trigger, as a function). p_network: the client's network
-- as hex (RateLimits.networkKey); empty: no bucket. Internal: run by poopypals_register_device, as the profile role.
CREATE FUNCTION poopypals_take_registration(p_network text, p_burst double precision, p_rate double precision) RETURNS void
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst constant double precision := coalesce(p_burst, 30);
    rate constant double precision := coalesce(p_rate, 1.0 / 30);
    left_over double precision;
BEGIN
    IF coalesce(p_network, '') = '' THEN
        RETURN;
    END IF;
    INSERT INTO public.registration_buckets AS b (network, tokens, refilled_at) VALUES (decode(p_network, 'hex'), burst - 1, now())
    ON CONFLICT (network) DO UPDATE
        SET tokens = least(burst, b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * rate) - 1,
            refilled_at = now()
    RETURNING b.tokens INTO left_over;
    IF left_over < 0 THEN
        RAISE EXCEPTION 'too many devices registered from this network' USING ERRCODE = 'PPR02',
            DETAIL = ceil(-left_over / greatest(rate, 0.0000001))::bigint::text;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION poopypals_take_registration(text, double precision, double precision) FROM PUBLIC;

-- Registration of the calling device (app.device_id), on every launch. Outcomes: created and updated (with the
-- device row), being_erased (the key is a device whose erasure is under way: nothing changes), not_registered (the
-- key is unknown and p_create is false: a weak id, which may update but not create). A created device takes a token
-- of p_network's bucket (PPR02 when empty).
CREATE FUNCTION poopypals_register_device(
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
        ELSIF EXISTS (SELECT FROM public.devices d WHERE d.key OPERATOR(pg_catalog.=) device_key AND d.erasing_since IS NOT NULL) THEN
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
    RETURN QUERY SELECT result, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                        d.is_simulator, d.created_at, d.last_seen_at
                 FROM (SELECT) AS one LEFT JOIN public.devices d ON result IN ('created', 'updated') AND d.id = device;
END
$$;
REVOKE ALL ON FUNCTION poopypals_register_device(text, text, text, text, boolean, boolean, text, double precision, double precision) FROM PUBLIC;

-- Rotation (replaces 0021's): the device is found by the map, its row is locked, and the map's row moves with the
-- key. The new key is in use when it is a device's, live (the map) or being erased (devices).
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
          OR EXISTS (SELECT FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) p_new_key)
          OR EXISTS (SELECT FROM public.devices d WHERE d.key = p_new_key) THEN
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
    RETURN QUERY SELECT result, d.key, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                        d.is_simulator, d.created_at, d.last_seen_at
                 FROM (SELECT) AS one LEFT JOIN public.devices d ON result = 'rotated' AND d.id = device;
END
$$;

-- Erasure of the calling device (replaces 0021's): found by the map while it is live, by devices.key while its
-- erasure is under way (a later call continues it); the map's row goes when the erasure starts.
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
    IF FOUND THEN
        -- Still under this key (the lock re-reads the row: a rotation that committed meanwhile moved it away).
        SELECT * INTO device FROM public.devices d WHERE d.id = live AND d.key = device_key FOR UPDATE;
    ELSE
        SELECT * INTO device FROM public.devices d WHERE d.key = device_key FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false, 0::bigint;
        RETURN;
    END IF;
    IF device.erasing_since IS NULL THEN
        IF device.user_id IS NOT NULL THEN
            PERFORM FROM public.users u WHERE u.id = device.user_id FOR UPDATE;
        END IF;
        UPDATE public.devices d SET erasing_since = clock_timestamp(), user_id = NULL WHERE d.id = device.id;
        DELETE FROM public.device_key_map m WHERE m.id = device.id;
        IF device.user_id IS NOT NULL AND device.user_id = p_subject
           AND NOT EXISTS (SELECT FROM public.devices d WHERE d.user_id = device.user_id) THEN
            DELETE FROM public.users u WHERE u.id = device.user_id;
            profile_gone := FOUND;
        END IF;
    END IF;
    SELECT b.removed, b.remaining INTO n, left_over FROM public.poopypals_erase_batch(device.id, p_batch) b;
    RETURN QUERY SELECT true, n, profile_gone, left_over;
END
$$;

-- Erasure by email (replaces 0021's): the map's rows of the person's devices go with them.
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
BEGIN
    SELECT u.id INTO target FROM public.users u WHERE u.email = lower(btrim(p_email));
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0, 0::bigint;
        RETURN;
    END IF;
    -- Devices first, then the profile: the order the device functions lock in, so that they cannot deadlock.
    PERFORM FROM public.devices d WHERE d.user_id = target ORDER BY d.id FOR UPDATE;
    PERFORM FROM public.users u WHERE u.id = target FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0, 0::bigint;
        RETURN;
    END IF;
    SELECT count(*)::integer, coalesce(sum(d.log_count), 0)::bigint INTO device_count, log_count
    FROM public.devices d WHERE d.user_id = target;
    IF NOT p_dry_run THEN
        DELETE FROM public.device_key_map m WHERE m.id IN (SELECT d.id FROM public.devices d WHERE d.user_id = target);
        DELETE FROM public.devices d WHERE d.user_id = target;
        DELETE FROM public.users u WHERE u.id = target;
    END IF;
    RETURN QUERY SELECT 1, device_count, log_count;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION poopypals_register_device(text, text, text, text, boolean, boolean, text, double precision, double precision) TO %I',
                   poopypals_service_role());
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
