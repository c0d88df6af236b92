-- Users under row-level security, FORCEd: a device sees and updates only the user its devices.user_id points
-- at; an unlinked device sees no user; nobody else (the owner included) sees any.
--
-- Creating or finding a profile must look at every user (is this subject known? does another account already
-- hold this email?), which the service role must not be able to do. That one step runs in a narrow SECURITY
-- DEFINER function owned by poopypals_profiles, a NOLOGIN role that owns nothing else: it answers only about
-- the calling token's subject, and reveals nothing about another account but the fact that the email is taken.

-- The function's owner, and the role monitoring reads users as (the login can switch to it, as to
-- poopypals_app; see 0007 for why SET must be granted explicitly on PostgreSQL 16+).
DO $$
DECLARE
    set_option_exists constant boolean := current_setting('server_version_num')::int >= 160000;
    needed constant text := CASE WHEN set_option_exists THEN 'SET' ELSE 'MEMBER' END;
    grant_sql constant text := CASE
        WHEN set_option_exists THEN format('GRANT poopypals_profiles TO %I WITH SET TRUE, INHERIT FALSE', current_user)
        ELSE format('GRANT poopypals_profiles TO %I', current_user)
    END;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'poopypals_profiles') THEN
        BEGIN
            CREATE ROLE poopypals_profiles NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'poopypals_profiles', needed) THEN
        BEGIN
            EXECUTE grant_sql;
        EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'poopypals_profiles', needed) THEN
        RAISE EXCEPTION 'role % cannot SET ROLE poopypals_profiles', current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('A superuser, or a role with ADMIN OPTION on poopypals_profiles, must run: %s; '
                                'then run the migrations again.', grant_sql);
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO poopypals_profiles;
GRANT SELECT, INSERT (id, email, full_name, date_of_birth), UPDATE (full_name, date_of_birth, updated_at)
    ON users TO poopypals_profiles;
GRANT SELECT, UPDATE (user_id, last_seen_at) ON devices TO poopypals_profiles;
GRANT EXECUTE ON FUNCTION get_current_device_id() TO poopypals_profiles;

-- Profiles are created only through the function below.
REVOKE INSERT ON users FROM poopypals_app;

-- A device's user_id now decides which user it can read, so a device must not set it itself (it could point
-- at anyone's id): only the function below links a device, for the token's subject. The service role keeps
-- what registering and updating a device needs.
REVOKE INSERT, UPDATE ON devices FROM poopypals_app;
GRANT INSERT (id, model, os_version, app_version, build_number, is_simulator) ON devices TO poopypals_app;
GRANT UPDATE (model, os_version, app_version, build_number, is_simulator, last_seen_at) ON devices TO poopypals_app;

ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE users FORCE ROW LEVEL SECURITY;

CREATE POLICY "Devices can read own user" ON users FOR SELECT TO poopypals_app
    USING (id = (SELECT d.user_id FROM devices d WHERE d.id = (SELECT get_current_device_id())));
CREATE POLICY "Devices can update own user" ON users FOR UPDATE TO poopypals_app
    USING (id = (SELECT d.user_id FROM devices d WHERE d.id = (SELECT get_current_device_id())))
    WITH CHECK (id = (SELECT d.user_id FROM devices d WHERE d.id = (SELECT get_current_device_id())));
-- `current_user = …` as well as `TO …`: on PostgreSQL 15 the login inherits the roles granted to it, and a
-- policy for a role applies to its members, so `TO` alone would let the table owner read every user again.
CREATE POLICY "Profiles can read users" ON users FOR SELECT TO poopypals_profiles
    USING (current_user = 'poopypals_profiles');
CREATE POLICY "Profiles can create users" ON users FOR INSERT TO poopypals_profiles
    WITH CHECK (current_user = 'poopypals_profiles');
CREATE POLICY "Profiles can update users" ON users FOR UPDATE TO poopypals_profiles
    USING (current_user = 'poopypals_profiles') WITH CHECK (current_user = 'poopypals_profiles');

-- Emails: the same normalisation as the service (no whitespace anywhere, lower case). 0006's check trims
-- only spaces, so 'x@y.com<TAB>' passed it; this one does not. NOT VALID, then validated when the data allows.
ALTER TABLE users ADD CONSTRAINT users_email_no_space CHECK (email !~ '[[:space:]]') NOT VALID;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM users WHERE email ~ '[[:space:]]') THEN
        ALTER TABLE users VALIDATE CONSTRAINT users_email_no_space;
    END IF;
END
$$;

-- The one way to create or find a profile: by the token's subject only, for the calling device, which is
-- linked in the same transaction. Outcomes:
--   existed, created, conflict  the subject's user (conflict: a concurrent call for the same subject won the
--                               insert; SQLSTATE 23505 on the key or the email means "it already exists")
--   email_in_use                another account holds this email: no row, nothing written
-- Raises P0002 when the calling device is not registered, so the transaction (and any user it created)
-- rolls back. p_set_* say whether to write full_name / date_of_birth (absent from a request: left alone).
CREATE FUNCTION poopypals_ensure_profile(
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
    result text;
    violated text;
BEGIN
    IF device IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM FROM public.devices d WHERE d.id = device;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this device is not registered' USING ERRCODE = 'no_data_found';
    END IF;

    SELECT * INTO found_user FROM public.users u WHERE u.id = p_id FOR UPDATE;
    IF FOUND THEN
        result := 'existed';
    ELSIF EXISTS (SELECT FROM public.users u WHERE u.email = p_email) THEN
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

-- A new owner needs CREATE on the schema at the moment of the transfer, and not after it.
GRANT CREATE ON SCHEMA public TO poopypals_profiles;
ALTER FUNCTION poopypals_ensure_profile(uuid, text, boolean, text, boolean, date) OWNER TO poopypals_profiles;
REVOKE CREATE ON SCHEMA public FROM poopypals_profiles;
REVOKE ALL ON FUNCTION poopypals_ensure_profile(uuid, text, boolean, text, boolean, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_ensure_profile(uuid, text, boolean, text, boolean, date) TO poopypals_app;
