-- Device isolation enforced by PostgreSQL itself. Every request sets `app.device_id` for its transaction
-- (set_config(..., true)) and switches to the service role poopypals_app; the policies below compare each
-- row's device with get_current_device_id().

-- The device of the current transaction, or NULL. After a transaction-local set_config ends, PostgreSQL
-- reports the setting as '' (not NULL) on that connection, and ''::uuid would raise: NULLIF turns both the
-- unset and the empty case into NULL, so a request without a device sees nothing and fails nothing.
CREATE OR REPLACE FUNCTION get_current_device_id() RETURNS uuid
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT NULLIF(current_setting('app.device_id', true), '')::uuid
$$;

-- The service role: no login, no ownership, no BYPASSRLS. Roles are cluster-wide, so another database's
-- migration may create it at the same moment: that race is harmless.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'poopypals_app') THEN
        BEGIN
            CREATE ROLE poopypals_app NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- The role that runs migrations (and the service's login) must be able to switch to it.
    IF NOT pg_has_role(current_user, 'poopypals_app', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT poopypals_app TO %I', current_user);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO poopypals_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON devices, poop_logs TO poopypals_app;
GRANT EXECUTE ON FUNCTION get_current_device_id() TO poopypals_app;

-- FORCE: the table owner is subject to the policies too, so a code path that forgets to switch roles still
-- sees only its device's rows. (SELECT get_current_device_id()) is evaluated once per statement.
ALTER TABLE poop_logs ENABLE ROW LEVEL SECURITY;
ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY;

CREATE POLICY "Devices can read own data" ON poop_logs
    FOR SELECT USING (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can insert own data" ON poop_logs
    FOR INSERT WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can update own data" ON poop_logs
    FOR UPDATE USING (device_id = (SELECT get_current_device_id()))
    WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can delete own data" ON poop_logs
    FOR DELETE USING (device_id = (SELECT get_current_device_id()));

-- A device sees and changes only its own row, and can insert only itself.
ALTER TABLE devices ENABLE ROW LEVEL SECURITY;
ALTER TABLE devices FORCE ROW LEVEL SECURITY;

CREATE POLICY "Devices can read own data" ON devices
    FOR SELECT USING (id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can insert own data" ON devices
    FOR INSERT WITH CHECK (id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can update own data" ON devices
    FOR UPDATE USING (id = (SELECT get_current_device_id()))
    WITH CHECK (id = (SELECT get_current_device_id()));
CREATE POLICY "Devices can delete own data" ON devices
    FOR DELETE USING (id = (SELECT get_current_device_id()));
