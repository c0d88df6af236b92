-- Issue 45 (docs/scaling.md, "Sharding by device"): every policy in a form a Citus shard can run. Citus refuses a
-- policy with a sub-select when it propagates it to the shards ("unexpected non-SELECT command in SubLink", and
-- "Subqueries are not supported in policies on distributed tables" for the users' ones), and a worker cannot read
-- a distributed table from a shard's policy (it reads the table's empty shell there and answers NULL, measured).
--
-- - The device policies of poop_logs, poop_log_tombstones and devices call the function itself:
--   `device_id = get_current_device_id()` instead of `device_id = (SELECT get_current_device_id())`. The sub-select
--   made the call once per statement; the plain call of a STABLE function is also made once per scan when it is
--   the index condition, as in every device statement (device_id leads each of these tables' keys). Measured on
--   PostgreSQL 15.20 (pgbench TPS, 8 clients, 6 s, 3 rounds; list 20, get, sync pull, create): no difference
--   beyond the runs' spread (list 9 506/8 810/7 028 before, 8 594/8 025/7 923 after; create 3 738/4 325/3 899,
--   3 840/3 597/4 122).
-- - A device's user: the key map keeps each device's user_id (a foreign key to users, so the duplicate-user merger
--   moves it with the rest), written where the link is made (poopypals_ensure_profile) and gone with the map's row
--   (erasure). users' two device policies read it through get_current_device_user_id(), as the device policies read
--   the map through get_current_device_id(). On Citus the map is a reference table: a copy on every node.
-- - The profile role's policies on poop_logs no longer look up devices being erased (a worker cannot: they keep
--   their names, "… logs of erased devices", and now admit every log to that role alone); that
--   role's only delete of logs, poopypals_erase_batch (internal to the erasure functions), now refuses a device
--   whose erasure has not started, itself.

DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
END
$$;

ALTER POLICY "Devices can read own data" ON poop_logs USING (device_id = get_current_device_id());
ALTER POLICY "Devices can insert own data" ON poop_logs WITH CHECK (device_id = get_current_device_id());
ALTER POLICY "Devices can update own data" ON poop_logs USING (device_id = get_current_device_id())
    WITH CHECK (device_id = get_current_device_id());
ALTER POLICY "Devices can delete own data" ON poop_logs USING (device_id = get_current_device_id());
ALTER POLICY "Devices can read own data" ON poop_log_tombstones USING (device_id = get_current_device_id());
ALTER POLICY "Devices can insert own data" ON poop_log_tombstones WITH CHECK (device_id = get_current_device_id());
ALTER POLICY "Devices can update own data" ON poop_log_tombstones USING (device_id = get_current_device_id())
    WITH CHECK (device_id = get_current_device_id());
ALTER POLICY "Devices can delete own data" ON poop_log_tombstones USING (device_id = get_current_device_id());
ALTER POLICY "Devices can read own data" ON devices USING (key = get_current_device_key() AND erasing_since IS NULL);
ALTER POLICY "Devices can insert own data" ON devices WITH CHECK (key = get_current_device_key() AND erasing_since IS NULL);
ALTER POLICY "Devices can update own data" ON devices USING (key = get_current_device_key() AND erasing_since IS NULL)
    WITH CHECK (key = get_current_device_key() AND erasing_since IS NULL);
ALTER POLICY "Devices can delete own data" ON devices USING (key = get_current_device_key() AND erasing_since IS NULL);

-- Each device's user, in the map. Filled as the profile role (it reads every device and keeps the map; row-level
-- security stays forced throughout, as in 0026).
LOCK TABLE devices IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE device_key_map ADD COLUMN user_id uuid REFERENCES users (id) ON DELETE SET NULL;
DO $$
BEGIN
    EXECUTE format('GRANT UPDATE (user_id) ON device_key_map TO %I', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;
UPDATE public.device_key_map m SET user_id = d.user_id FROM public.devices d WHERE d.id = m.id AND d.user_id IS NOT NULL;
RESET ROLE;

CREATE FUNCTION get_current_device_user_id() RETURNS uuid
    LANGUAGE plpgsql
    STABLE
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT m.user_id FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) public.get_current_device_key());
END
$$;
COMMENT ON FUNCTION get_current_device_user_id() IS 'The user the transaction''s device is linked to, from the key map (sql/0028): what users'' device policies compare with.';
DO $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION get_current_device_user_id() TO %I, %I', poopypals_service_role(), poopypals_profiles_role());
END
$$;
ALTER POLICY "Devices can read own user" ON users USING (id = get_current_device_user_id());
ALTER POLICY "Devices can update own user" ON users USING (id = get_current_device_user_id())
    WITH CHECK (id = get_current_device_user_id());

DO $$
BEGIN
    EXECUTE format('ALTER POLICY "Profiles can read logs of erased devices" ON poop_logs USING (current_user = %L)', poopypals_profiles_role());
    EXECUTE format('ALTER POLICY "Profiles can erase logs of erased devices" ON poop_logs USING (current_user = %L)', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- 0024's batch, which now checks the erasure itself: the profile role's policies no longer do.
CREATE OR REPLACE FUNCTION poopypals_erase_batch(p_device uuid, p_batch integer) RETURNS TABLE (removed bigint, remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    left_over bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM public.devices d WHERE d.id = p_device AND d.erasing_since IS NOT NULL) THEN
        RAISE EXCEPTION 'the device is not being erased' USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
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

-- ensure_profile (0025's), which now writes the link into the map too, and locks its device only while the device
-- still has the request's key (a rotation that committed meanwhile moved it: not registered, as before 0026).
CREATE OR REPLACE FUNCTION poopypals_ensure_profile(
    p_id uuid, p_email text,
    p_set_full_name boolean, p_full_name text,
    p_set_date_of_birth boolean, p_date_of_birth date
) RETURNS TABLE (
    outcome text, id uuid, email text, full_name text, role text, date_of_birth date,
    created_at timestamptz, updated_at timestamptz
)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    device constant uuid := public.get_current_device_id();
    found_user public.users%ROWTYPE;
    linked uuid;
    result text;
    violated text;
BEGIN
    IF public.get_current_device_key() IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Already linked to this subject, whose profile exists, and nothing to change: answered from what is
    -- committed, with no lock and no write (0025).
    IF NOT (p_set_full_name OR p_set_date_of_birth) THEN
        SELECT u.* INTO found_user FROM public.devices d JOIN public.users u ON u.id = d.user_id
        WHERE d.id = device AND d.user_id = p_id;
        IF FOUND THEN
            RETURN QUERY SELECT 'existed'::text, found_user.id, found_user.email, found_user.full_name,
                                coalesce(found_user.role, 'student'), found_user.date_of_birth,
                                found_user.created_at, found_user.updated_at;
            RETURN;
        END IF;
    END IF;
    -- Locked: a concurrent re-link of the same device waits, and then sees this one's link. A device whose erasure
    -- committed meanwhile no longer qualifies (the lock re-reads the row): not registered, and no profile is made
    -- or linked for it after its erasure said the profile was gone.
    SELECT d.user_id INTO linked FROM public.devices d
    WHERE d.id = device AND d.key = public.get_current_device_key() AND d.erasing_since IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this device is not registered' USING ERRCODE = 'no_data_found';
    END IF;
    IF linked IS NOT NULL AND linked <> p_id THEN
        RETURN QUERY SELECT 'device_linked'::text, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::date,
                            NULL::timestamptz, NULL::timestamptz;
        RETURN;
    END IF;

    SELECT * INTO found_user FROM public.users u WHERE u.id = p_id FOR UPDATE;
    IF FOUND THEN
        result := 'existed';
    -- Another subject's row only: this subject's own row, committed by a concurrent call since the lookup above
    -- (READ COMMITTED takes a new snapshot per statement), is found by the insert's key conflict below.
    ELSIF EXISTS (SELECT FROM public.users u WHERE u.email = p_email AND u.id <> p_id) THEN
        RETURN QUERY SELECT 'email_in_use'::text, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::date,
                            NULL::timestamptz, NULL::timestamptz;
        RETURN;
    ELSE
        BEGIN
            INSERT INTO public.users (id, email, full_name, date_of_birth)
            VALUES (p_id, p_email, CASE WHEN p_set_full_name THEN p_full_name END,
                    CASE WHEN p_set_date_of_birth THEN p_date_of_birth END)
            RETURNING * INTO found_user;
            result := 'created';
        EXCEPTION WHEN unique_violation THEN
            GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
            IF violated NOT IN ('users_pkey', 'users_email_unique') THEN
                RAISE;
            END IF;
            SELECT * INTO found_user FROM public.users u WHERE u.id = p_id FOR UPDATE;
            IF NOT FOUND THEN
                -- Another subject took the email meanwhile.
                RETURN QUERY SELECT 'email_in_use'::text, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::date,
                                    NULL::timestamptz, NULL::timestamptz;
                RETURN;
            END IF;
            result := 'conflict';
        END;
    END IF;

    IF result <> 'created' AND (p_set_full_name OR p_set_date_of_birth) THEN
        UPDATE public.users u SET
            full_name = CASE WHEN p_set_full_name THEN p_full_name ELSE u.full_name END,
            date_of_birth = CASE WHEN p_set_date_of_birth THEN p_date_of_birth ELSE u.date_of_birth END,
            updated_at = now()
        WHERE u.id = p_id
          AND ((p_set_full_name AND u.full_name IS DISTINCT FROM p_full_name)
               OR (p_set_date_of_birth AND u.date_of_birth IS DISTINCT FROM p_date_of_birth))
        RETURNING * INTO found_user;
        IF NOT FOUND THEN
            SELECT * INTO found_user FROM public.users u WHERE u.id = p_id;
        END IF;
    END IF;

    UPDATE public.devices d SET user_id = p_id, last_seen_at = now() WHERE d.id = device;
    UPDATE public.device_key_map m SET user_id = p_id WHERE m.id = device AND m.user_id IS DISTINCT FROM p_id;

    RETURN QUERY SELECT result, found_user.id, found_user.email, found_user.full_name,
                        coalesce(found_user.role, 'student'), found_user.date_of_birth,
                        found_user.created_at, found_user.updated_at;
END
$$;

DO $$
BEGIN
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
