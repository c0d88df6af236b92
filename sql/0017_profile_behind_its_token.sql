-- The device id alone revealed and erased the person's profile (issue 42, item 5): GET /v1/export returned the
-- linked profile's email, name and date of birth, and DELETE /v1/device erased the profile, with X-Device-ID only,
-- while GET /v1/profile needs the subject's token. A sold phone's id leaked its owner's identity.
--
-- Erasure now takes the subject the caller proved with a token (NULL without one): the profile is erased only for
-- that subject, and only when no other device links to it; otherwise the device goes and the profile stays, for
-- its owner to erase with their token (or by email: `poopypals users erase`). The export's profile is the
-- service's business (it reads it only for a token of that subject).
--
-- A new function (an argument more) with the properties of 0010's: SECURITY DEFINER owned by the profile role,
-- search_path fixed, EXECUTE for the service role only (revoked from PUBLIC while this login owns it, as 0010
-- explains); the one without the argument is dropped.

CREATE FUNCTION poopypals_erase_device(p_subject uuid) RETURNS TABLE (erased boolean, logs bigint, profile_erased boolean)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    device constant uuid := public.get_current_device_id();
    linked uuid;
    deleted_link uuid;
    log_count bigint;
BEGIN
    IF device IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT d.user_id INTO linked FROM public.devices d WHERE d.id = device;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false;
        RETURN;
    END IF;
    IF linked IS NOT NULL THEN
        PERFORM FROM public.users u WHERE u.id = linked FOR UPDATE;
    END IF;
    SELECT count(*) INTO log_count FROM public.poop_logs l WHERE l.device_id = device;
    DELETE FROM public.devices d WHERE d.id = device RETURNING d.user_id INTO deleted_link;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false;
        RETURN;
    END IF;
    IF deleted_link IS NOT NULL AND deleted_link IS DISTINCT FROM linked THEN
        -- Linked to another profile between the read and the delete: lock that one instead.
        PERFORM FROM public.users u WHERE u.id = deleted_link FOR UPDATE;
    END IF;
    IF deleted_link IS NOT NULL AND deleted_link = p_subject
       AND NOT EXISTS (SELECT FROM public.devices d WHERE d.user_id = deleted_link) THEN
        DELETE FROM public.users u WHERE u.id = deleted_link;
        RETURN QUERY SELECT true, log_count, FOUND;
        RETURN;
    END IF;
    RETURN QUERY SELECT true, log_count, false;
END
$$;

REVOKE ALL ON FUNCTION poopypals_erase_device(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_erase_device(uuid) TO poopypals_app;
GRANT CREATE ON SCHEMA public TO poopypals_profiles;
ALTER FUNCTION poopypals_erase_device(uuid) OWNER TO poopypals_profiles;
DROP FUNCTION poopypals_erase_device();
REVOKE CREATE ON SCHEMA public FROM poopypals_profiles;
