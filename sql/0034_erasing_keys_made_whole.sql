-- Issue 45, after a review of sql/0033: its list of devices being erased made whole again, and rotation's check of
-- the new key made once more after it takes the key's map row.
--
-- - A call of 0033's functions' earlier versions that was under way while 0033 ran (waiting on a device's row lock,
--   which 0033's table lock does not conflict with) finishes with the code it started with: an erasure begun so
--   has no row in erasing_device_keys (the background erasure never chooses it, and on Citus its key could be
--   registered again while it is erased), and a last batch so leaves its row behind (its key answered "being
--   erased" until the background erasure drops the row). Here, in a transaction of its own after 0033's, under
--   the same table lock: every device being erased gets its row, and a row whose device is not being erased goes.
--   Also the key map's user_id is set again from each live device's, where they differ (0033's erasure now asks
--   the map for a profile's other devices; 0028 keeps them equal, and a link made while 0028 ran is the same case).
-- - Rotation to a key that was registered, and whose erasure began, between rotation's check and its update of the
--   map: on one PostgreSQL devices.key's unique key answers "in use"; on Citus the key got a second device while its
--   first was being erased. It asks the erasing keys again once it holds the map's row, as registration does (0033).
--
-- Each row is read as the profile role (devices' and the map's row-level security is forced: the owner sees no row)
-- and written by it; on Citus one shard at a time (sequential), since the map and the erasing keys are reference
-- tables written after a read over every shard.

LOCK TABLE devices IN SHARE ROW EXCLUSIVE MODE;

DO $$
DECLARE
    r record;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    PERFORM set_config('role', poopypals_profiles_role(), true);
    FOR r IN SELECT d.id, d.key, d.erasing_since FROM public.devices d WHERE d.erasing_since IS NOT NULL LOOP
        INSERT INTO public.erasing_device_keys (id, key, since) VALUES (r.id, r.key, r.erasing_since) ON CONFLICT (id) DO NOTHING;
    END LOOP;
    FOR r IN SELECT e.id FROM public.erasing_device_keys e LOOP
        IF NOT EXISTS (SELECT 1 FROM public.devices d WHERE d.id = r.id AND d.erasing_since IS NOT NULL) THEN
            DELETE FROM public.erasing_device_keys e WHERE e.id = r.id;
        END IF;
    END LOOP;
    FOR r IN SELECT m.id, d.user_id FROM public.device_key_map m JOIN public.devices d ON d.id = m.id
             WHERE m.user_id IS DISTINCT FROM d.user_id LOOP
        UPDATE public.device_key_map m SET user_id = r.user_id WHERE m.id = r.id;
    END LOOP;
    PERFORM set_config('role', 'none', true);
END
$$;

-- Replaced as the profile role, which owns it (0022), with Citus's DDL propagation off where Citus is (as 0033).
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- 0033's rotation, asking the erasing keys again after its update of the map.
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
            -- The new key's device may have been registered and its erasure begun since the check above (the update
            -- waited for the erasure's delete of the key's map row): asked again now that the row is ours. On Citus
            -- devices.key is not unique: without this the key got a second device while its first was being erased.
            IF EXISTS (SELECT 1 FROM public.erasing_device_keys e WHERE e.key OPERATOR(pg_catalog.=) p_new_key) THEN
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


DO $$
BEGIN
    PERFORM set_config('role', 'none', true);
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
