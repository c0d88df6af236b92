-- Issue 45: the devices being erased, by key and by id, in a table of their own (a reference table on Citus), so
-- that a new key's registration, a rotation's "is the new key in use", an erasure continued by its key and the
-- background erasure's choice of the next device each read it, and not every shard's devices.
--
-- Why: since 0026 a key's live device is found by the key map, and a device being erased has no row there (its
-- erasure deletes it, so that no request finds the device any more). What still had to be told by its key was read
-- from devices.key, which is not the distribution column on Citus: registration of every new key asked all 32
-- shards "is a device of this key being erased?" (docs/scaling.md's routing table said so, and the one-shard test
-- registered its devices before it started counting), as did rotation's check of the new key and the erasure of a
-- device continued by a later call. And on Citus devices.key has no unique key (0031): an erasure that began
-- between registration's check and its insert of the map's row left the key with a second, new device while its
-- first was being erased. And the background erasure found the oldest erasures by devices.erasing_since, over
-- every shard, for each batch.
--
-- - erasing_device_keys (id, key, since): a row from the start of a device's erasure until its row is deleted (the
--   last batch). Keyed by the device's id, not its key: should a key ever have two devices being erased (on Citus,
--   by the race below before this migration), each is listed, and the background erasure finishes both. Kept by the profile role's functions only; the service role has no grant. Filled here from the devices
--   being erased now (devices is locked against writes until this transaction commits; its rows read as the
--   profile role, for the owner sees none under forced row-level security).
-- - poopypals_register_device: "being erased" by that row (before, and again after, it takes the map's row: the
--   race above, closed on Citus as devices.key's unique key closes it on one PostgreSQL).
-- - poopypals_rotate_device: the new key is in use when the map or this table has it.
-- - poopypals_erase_device: a device being erased is found by this table; its start writes the row; the profile's
--   other devices are the map's rows linked to it (0028 keeps the map's user_id), not every shard's devices.
-- - poopypals_erase_batch: deletes the row with the device.
-- - poopypals_erase_pending: the oldest erasures and their count from this table.
-- On one PostgreSQL what a request sees does not change: the same outcomes, errors and SQLSTATEs.

LOCK TABLE devices IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE erasing_device_keys (
    id uuid PRIMARY KEY,
    key uuid NOT NULL,
    since timestamptz NOT NULL
);
CREATE INDEX erasing_device_keys_key ON erasing_device_keys (key);
CREATE INDEX erasing_device_keys_since ON erasing_device_keys (since);
COMMENT ON TABLE erasing_device_keys IS 'Each device being erased (its id, key and erasing_since), until its row is deleted (sql/0033).';
ALTER TABLE erasing_device_keys ENABLE ROW LEVEL SECURITY;  -- forced once filled (below)

DO $$
DECLARE
    profiles constant text := poopypals_profiles_role();
    distributed boolean := false;
BEGIN
    EXECUTE format('CREATE POLICY "Profiles keep the erasing keys" ON erasing_device_keys FOR ALL TO %I USING (current_user = %L) WITH CHECK (current_user = %L)',
                   profiles, profiles, profiles);
    EXECUTE format('GRANT SELECT, INSERT, DELETE ON erasing_device_keys TO %I', profiles);
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        -- Citus's catalog, read only where it exists (EXECUTE: planned when run).
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = ''public.devices''::regclass)' INTO distributed;
    END IF;
    IF distributed THEN
        -- As 0031 made the key map: a copy on every node.
        PERFORM create_reference_table('erasing_device_keys');
    END IF;
END
$$;

-- Filled from the devices being erased, read as the profile role (devices' row-level security is forced: its owner,
-- this migration's role, sees no device) and written as the owner before the new table's is forced (on Citus the
-- role that made the table's placements in this transaction is the only one that may write them: "cannot perform
-- query on placements that were modified in this transaction by a different user"). Row by row: on Citus an
-- INSERT … SELECT from a distributed table is copied into its target.
DO $$
DECLARE
    r record;
    keys uuid[] := '{}';
    ids uuid[] := '{}';
    times timestamptz[] := '{}';
BEGIN
    PERFORM set_config('role', poopypals_profiles_role(), true);
    FOR r IN SELECT d.key, d.id, d.erasing_since FROM public.devices d WHERE d.erasing_since IS NOT NULL LOOP
        keys := keys || r.key;
        ids := ids || r.id;
        times := times || r.erasing_since;
    END LOOP;
    PERFORM set_config('role', 'none', true);
    FOR i IN 1..coalesce(array_length(ids, 1), 0) LOOP
        INSERT INTO public.erasing_device_keys (id, key, since) VALUES (ids[i], keys[i], times[i]);
    END LOOP;
END
$$;
ALTER TABLE erasing_device_keys FORCE ROW LEVEL SECURITY;

-- The functions replaced as the profile role, which owns them (0022), with Citus's DDL propagation off where Citus
-- is: the coordinator runs them (0029, as 0032).
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- 0029's registration: "being erased" by the erasing keys.
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
        ELSIF EXISTS (SELECT 1 FROM public.erasing_device_keys e WHERE e.key OPERATOR(pg_catalog.=) device_key) THEN
            -- Not in the map but a device being erased: one row of a reference table, not every shard's devices.
            result := 'being_erased';
            EXIT;
        END IF;
        BEGIN
            INSERT INTO public.device_key_map (key, id) VALUES (device_key, gen_random_uuid())
            ON CONFLICT (key) DO NOTHING
            RETURNING id INTO device;
            IF FOUND THEN
                -- The key's erasure may have begun since the check above, and committed before the insert took the
                -- map's row (it waited for the erasure's delete of it): asked again now that the row is ours. On
                -- Citus devices.key is not unique (below): without this, the key got a second device while its first
                -- was being erased.
                IF EXISTS (SELECT 1 FROM public.erasing_device_keys e WHERE e.key OPERATOR(pg_catalog.=) device_key) THEN
                    RAISE EXCEPTION USING ERRCODE = 'unique_violation';
                END IF;
                PERFORM public.poopypals_take_registration(p_network, p_burst, p_rate);
                INSERT INTO public.devices (id, key, model, os_version, app_version, build_number, is_simulator)
                VALUES (device, device_key, p_model, p_os_version, p_app_version, p_build_number, p_is_simulator);
                result := 'created';
                EXIT;
            END IF;
        EXCEPTION WHEN unique_violation THEN
            -- The key's device began its erasure since the check above (found again above, or by devices.key's
            -- unique key on one PostgreSQL). The map row and the token go back with this block.
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


-- 0029's rotation: the new key is in use when a device being erased has it.
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
          OR EXISTS (SELECT 1 FROM public.erasing_device_keys e WHERE e.key OPERATOR(pg_catalog.=) p_new_key) THEN
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


-- 0029's erasure: a device being erased found by its key's row; the profile's other devices by the map.
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
        -- Being erased: its key's row of the reference table names it (not a look over every shard's devices).
        SELECT e.id INTO live FROM public.erasing_device_keys e WHERE e.key OPERATOR(pg_catalog.=) device_key ORDER BY e.since LIMIT 1;
    END IF;
    IF live IS NOT NULL THEN
        -- Still under this key (the lock re-reads the row: a rotation that committed meanwhile moved it away).
        SELECT * INTO device FROM public.devices d WHERE d.id = live AND d.key = device_key FOR UPDATE;
    END IF;
    IF live IS NULL OR NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false, 0::bigint;
        RETURN;
    END IF;
    IF device.erasing_since IS NULL THEN
        IF device.user_id IS NOT NULL THEN
            PERFORM FROM public.users u WHERE u.id = device.user_id FOR UPDATE;
        END IF;
        UPDATE public.devices d SET erasing_since = stopped_at, user_id = NULL WHERE d.id = device.id;
        DELETE FROM public.device_key_map m WHERE m.id = device.id;
        INSERT INTO public.erasing_device_keys (id, key, since) VALUES (device.id, device.key, stopped_at);
        -- The profile's other devices: the live ones are the map's rows linked to it (0028 keeps the map's user_id
        -- with the device's; a device being erased has none), one reference table, not every shard's devices.
        IF device.user_id IS NOT NULL AND device.user_id = p_subject
           AND NOT EXISTS (SELECT 1 FROM public.device_key_map m WHERE m.user_id = device.user_id) THEN
            DELETE FROM public.users u WHERE u.id = device.user_id;
            profile_gone := FOUND;
        END IF;
    END IF;
    SELECT b.removed, b.remaining INTO n, left_over FROM public.poopypals_erase_batch(device.id, p_batch) b;
    RETURN QUERY SELECT true, n, profile_gone, left_over;
END
$$;


-- 0028's batch (as 0029 rewrote it): the key's row goes with the device.
CREATE OR REPLACE FUNCTION poopypals_erase_batch(p_device uuid, p_batch integer) RETURNS TABLE (removed bigint, remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    left_over bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM public.devices d WHERE d.id = p_device AND d.erasing_since IS NOT NULL) THEN
        RAISE EXCEPTION 'the device is not being erased' USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    DELETE FROM public.poop_logs l
    WHERE l.device_id = p_device
      AND l.id IN (SELECT b.id FROM public.poop_logs b WHERE b.device_id = p_device LIMIT p_batch);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF NOT EXISTS (SELECT 1 FROM public.poop_logs l WHERE l.device_id = p_device) THEN
        DELETE FROM public.devices d WHERE d.id = p_device AND d.erasing_since IS NOT NULL;
        -- The key is free from now on (unless another device of it is being erased): a registration of it makes a
        -- new device.
        DELETE FROM public.erasing_device_keys e WHERE e.id = p_device;
        RETURN QUERY SELECT n, 0::bigint;
        RETURN;
    END IF;
    UPDATE public.devices d SET log_count = greatest(d.log_count - n, 1) WHERE d.id = p_device
    RETURNING d.log_count INTO left_over;
    RETURN QUERY SELECT n, coalesce(left_over, 1);
END
$$;

-- 0029's background erasure: the oldest erasures, and how many are left, from the erasing keys (one reference table),
-- each device then locked by its id as before.
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
    -- The oldest erasures first, each locked by its id; one another worker holds is skipped.
    FOR candidate IN SELECT e.id FROM public.erasing_device_keys e ORDER BY e.since LIMIT 16 LOOP
        SELECT d.id INTO target FROM public.devices d WHERE d.id = candidate AND d.erasing_since IS NOT NULL FOR UPDATE SKIP LOCKED;
        EXIT WHEN FOUND;
        IF NOT EXISTS (SELECT 1 FROM public.devices d WHERE d.id = candidate) THEN
            -- A row whose device is gone (none of our functions leaves one): dropped, so that it never stands first.
            DELETE FROM public.erasing_device_keys e WHERE e.id = candidate;
        END IF;
    END LOOP;
    IF target IS NOT NULL THEN
        SELECT b.removed INTO n FROM public.poopypals_erase_batch(target, p_batch) b;
    END IF;
    RETURN QUERY SELECT (SELECT count(*) FROM public.erasing_device_keys e), n;
END
$$;

DO $$
DECLARE
    distributed boolean := false;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = ''public.devices''::regclass)' INTO distributed;
    END IF;
    IF distributed THEN
        -- CREATE OR REPLACE replaced 0031's setting of the erasure with the definition's own: set again (as the
        -- owner, on the coordinator).
        ALTER FUNCTION poopypals_erase_device(uuid, integer) SET citus.multi_shard_modify_mode = 'sequential';
    END IF;
    PERFORM set_config('role', 'none', true);
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
