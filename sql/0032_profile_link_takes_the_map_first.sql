-- Issue 45: a profile's first link takes the key map's row before it writes users, as registration does.
--
-- On Citus, users and device_key_map are reference tables, and Citus serializes the writes to each with a lock per
-- table (on the first worker); a write to a table whose foreign keys point at users (the map, devices) takes users'
-- lock after its own. Registration of a new key writes the map (then devices); poopypals_ensure_profile wrote users,
-- then devices, then the map. A registration and a link at once (any two devices) each held the lock the other
-- wanted: a distributed deadlock, cancelled after about 2 s and retried by the service. Found by make bench's seeding
-- (58 deadlocks in 400 registrations and links on four connections) and by
-- CitusTests…devicesRegisteringAndLinkingProfilesAtOnceNeverDeadlock, which failed on it.
--
-- The function is 0028's (as 0029 rewrote it: `SELECT 1 FROM` in its sub-selects) with one statement more: an
-- update of the device's map row that changes nothing, before users is touched. Only the writing path pays it (a
-- link already made is answered before, with no lock); on plain PostgreSQL it is a row lock and one row version of
-- the map per first link.
--
-- Replaced as the profile role, which owns it (0022), with Citus's DDL propagation off where Citus is: the
-- coordinator runs it (0029), as 0031 altered the erasures.

DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

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

    -- The map's row first, unchanged, before any write of users: on Citus each reference table's writes are
    -- serialized by a lock per table, and a write to the map (or to devices) takes users' lock after the map's. A
    -- registration writes the map first; this did users first and the map last, and the two waited for each other.
    UPDATE public.device_key_map m SET user_id = m.user_id WHERE m.id = device;

    SELECT * INTO found_user FROM public.users u WHERE u.id = p_id FOR UPDATE;
    IF FOUND THEN
        result := 'existed';
    -- Another subject's row only: this subject's own row, committed by a concurrent call since the lookup above
    -- (READ COMMITTED takes a new snapshot per statement), is found by the insert's key conflict below.
    ELSIF EXISTS (SELECT 1 FROM public.users u WHERE u.email = p_email AND u.id <> p_id) THEN
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
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    -- Where the grant went (every node, on Citus).
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;
