-- A device linked to one profile was moved to another subject's silently (issue 42, item 10): PUT /v1/profile with
-- another subject's token relinked it, erasing the device then erased only the new profile, and the first person's
-- name, date of birth and email stayed with no device pointing at them and no word of it. Now a device linked to one
-- subject is not linked to another: the function answers 'device_linked' (409 device_linked_to_another_profile)
-- and changes nothing, not even the other subject's profile. To use another account on the same phone, the app
-- registers a new device id (a new device, unlinked).
--
-- Replaced as the function's owner, as 0013 did.
GRANT CREATE ON SCHEMA public TO poopypals_profiles;
SET LOCAL ROLE poopypals_profiles;
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
    IF device IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Locked: a concurrent re-link of the same device waits, and then sees this one's link.
    SELECT d.user_id INTO linked FROM public.devices d WHERE d.id = device FOR UPDATE;
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

    RETURN QUERY SELECT result, found_user.id, found_user.email, found_user.full_name,
                        coalesce(found_user.role, 'student'), found_user.date_of_birth,
                        found_user.created_at, found_user.updated_at;
END
$$;
RESET ROLE;
REVOKE CREATE ON SCHEMA public FROM poopypals_profiles;
