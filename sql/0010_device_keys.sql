-- The device id is a password: the database keeps only a one-way key of it.
--
-- key(id) = the first 16 bytes of SHA-256('poopypals.device.v1:' || the id in lower-case hyphenated form), as a
-- uuid. The service derives it from X-Device-ID once per request and sets app.device_id to it, so row-level
-- security compares keys exactly as it compared ids. A dump, a replica or a support query now shows keys, and a
-- key replayed as X-Device-ID is an unknown device. Ids are random 122-bit values: a fast digest without salt
-- is enough (nothing to guess), and the fixed derivation lets an operator find a device from an id a person
-- gives them (`poopypals devices key ID`).
--
-- Also here: rotation (a device moves to a new key, with everything it owns), erasure of a device and of a
-- profile, and what the profile role needs for them.

CREATE FUNCTION poopypals_device_key(device_id uuid) RETURNS uuid
    LANGUAGE sql
    IMMUTABLE
    STRICT
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT encode(substring(sha256(convert_to('poopypals.device.v1:' || lower(device_id::text), 'UTF8')) FROM 1 FOR 16),
                  'hex')::uuid
$$;

-- A log that moves to another key (rotation) keeps its change number: a move is not a change, and the phone's
-- sync cursor stays valid. Only the rotation function can move logs: a device's own UPDATE must keep device_id
-- equal to its key (row-level security, 0005).
CREATE OR REPLACE FUNCTION poop_logs_track_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE public.devices SET change_seq = change_seq + 1 WHERE id = OLD.device_id RETURNING change_seq INTO seq;
        IF seq IS NOT NULL THEN
            INSERT INTO public.poop_log_tombstones (device_id, id, change_seq) VALUES (OLD.device_id, OLD.id, seq)
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = now();
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.device_id IS DISTINCT FROM OLD.device_id THEN
        RETURN NEW;
    END IF;
    UPDATE public.devices SET change_seq = change_seq + 1 WHERE id = NEW.device_id RETURNING change_seq INTO seq;
    IF seq IS NULL THEN
        NEW.change_seq := coalesce(NEW.change_seq, 0);
        RETURN NEW;
    END IF;
    NEW.change_seq := seq;
    IF TG_OP = 'INSERT' THEN
        DELETE FROM public.poop_log_tombstones WHERE device_id = NEW.device_id AND id = NEW.id;
    END IF;
    RETURN NEW;
END
$$;

-- A device's rows follow its key when it changes (rotation) as they follow its deletion (erasure). The
-- cascades run as the table owner, which row-level security does not bind for referential actions.
ALTER TABLE poop_logs DROP CONSTRAINT poop_logs_device_id_fkey;
ALTER TABLE poop_logs ADD CONSTRAINT poop_logs_device_id_fkey
    FOREIGN KEY (device_id) REFERENCES devices (id) ON UPDATE CASCADE ON DELETE CASCADE;
ALTER TABLE poop_log_tombstones DROP CONSTRAINT poop_log_tombstones_device_id_fkey;
ALTER TABLE poop_log_tombstones ADD CONSTRAINT poop_log_tombstones_device_id_fkey
    FOREIGN KEY (device_id) REFERENCES devices (id) ON UPDATE CASCADE ON DELETE CASCADE;

-- Existing devices: every id becomes its key, and the cascades carry the logs and tombstones along, in this
-- one transaction. A phone that registered before keeps working with the same id. Row-level security is lifted
-- for this transaction only, so the owner sees every device.
ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
UPDATE devices SET id = poopypals_device_key(id);
ALTER TABLE devices FORCE ROW LEVEL SECURITY;

-- The profile role (0008) also erases and moves devices, through the functions below and `poopypals users
-- erase`. `current_user = …` as in 0008: on PostgreSQL 15 the owner inherits the role, and `TO` alone would
-- hand it these rows again.
-- change_seq: the delete trigger of poop_logs (0009) runs as the role that deletes, also inside a cascade; it
-- finds the device already gone and counts nothing, but it needs the privilege to look.
GRANT SELECT, DELETE, UPDATE (id, last_seen_at, change_seq) ON devices TO poopypals_profiles;
GRANT SELECT ON poop_logs TO poopypals_profiles;
GRANT DELETE ON users TO poopypals_profiles;

CREATE POLICY "Profiles can read devices" ON devices FOR SELECT TO poopypals_profiles
    USING (current_user = 'poopypals_profiles');
CREATE POLICY "Profiles can move devices" ON devices FOR UPDATE TO poopypals_profiles
    USING (current_user = 'poopypals_profiles') WITH CHECK (current_user = 'poopypals_profiles');
CREATE POLICY "Profiles can erase devices" ON devices FOR DELETE TO poopypals_profiles
    USING (current_user = 'poopypals_profiles');
CREATE POLICY "Profiles can erase users" ON users FOR DELETE TO poopypals_profiles
    USING (current_user = 'poopypals_profiles');

-- Rotation: the calling device (app.device_id) moves to p_new_key with its logs, tombstones, profile link and
-- change counter, in the caller's transaction. Outcomes: rotated (with the device row), not_registered,
-- in_use (the new key is a registered device, or the current one). The device row is locked first, so a write
-- of the old key in flight either commits before (and moves along) or waits and then finds no device (23503).
CREATE FUNCTION poopypals_rotate_device(p_new_key uuid) RETURNS TABLE (
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
    device constant uuid := public.get_current_device_id();
    result text := 'rotated';
BEGIN
    IF device IS NULL OR p_new_key IS NULL THEN
        RAISE EXCEPTION 'no device in this transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM FROM public.devices d WHERE d.id = device FOR UPDATE;
    IF NOT FOUND THEN
        result := 'not_registered';
    ELSIF p_new_key = device OR EXISTS (SELECT FROM public.devices d WHERE d.id = p_new_key) THEN
        result := 'in_use';
    ELSE
        BEGIN
            UPDATE public.devices d SET id = p_new_key, last_seen_at = now() WHERE d.id = device;
        EXCEPTION WHEN unique_violation THEN
            -- Registered by a concurrent transaction since the check above.
            result := 'in_use';
        END;
    END IF;
    -- One row: the outcome, with the device under its new key when it moved (NULLs otherwise).
    RETURN QUERY SELECT result, d.id, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                        d.is_simulator, d.created_at, d.last_seen_at
                 FROM (SELECT) AS one LEFT JOIN public.devices d ON result = 'rotated' AND d.id = p_new_key;
END
$$;

-- Erasure of the calling device: its row, and by cascade its logs and tombstones; its profile too when no
-- other device links to it. The profile row is locked before the device is deleted, so that two devices of one
-- profile erased at once cannot both leave it behind (the second sees the first's delete after waiting).
CREATE FUNCTION poopypals_erase_device() RETURNS TABLE (erased boolean, logs bigint, profile_erased boolean)
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
    IF deleted_link IS NOT NULL AND NOT EXISTS (SELECT FROM public.devices d WHERE d.user_id = deleted_link) THEN
        DELETE FROM public.users u WHERE u.id = deleted_link;
        RETURN QUERY SELECT true, log_count, FOUND;
        RETURN;
    END IF;
    RETURN QUERY SELECT true, log_count, false;
END
$$;

-- Erasure requested by email (`poopypals users erase`): the profile, every device linked to it, their logs and
-- tombstones. Counts only; p_dry_run counts without deleting. For operators: not granted to the service role.
CREATE FUNCTION poopypals_erase_user(p_email text, p_dry_run boolean)
    RETURNS TABLE (users integer, devices integer, logs bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target uuid;
    device uuid;
    device_count integer := 0;
    log_count bigint := 0;
    counted bigint;
BEGIN
    SELECT u.id INTO target FROM public.users u WHERE u.email = lower(btrim(p_email)) FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0, 0::bigint;
        RETURN;
    END IF;
    FOR device IN SELECT d.id FROM public.devices d WHERE d.user_id = target ORDER BY d.id FOR UPDATE LOOP
        -- A device's logs are visible under its own key only (row-level security).
        PERFORM set_config('app.device_id', device::text, true);
        SELECT count(*) INTO counted FROM public.poop_logs l WHERE l.device_id = device;
        log_count := log_count + counted;
        device_count := device_count + 1;
        IF NOT p_dry_run THEN
            DELETE FROM public.devices d WHERE d.id = device;
        END IF;
    END LOOP;
    PERFORM set_config('app.device_id', '', true);
    IF NOT p_dry_run THEN
        DELETE FROM public.users u WHERE u.id = target;
    END IF;
    RETURN QUERY SELECT 1, device_count, log_count;
END
$$;

-- Privileges first, while this login owns the functions: on PostgreSQL 16+ the login does not inherit the
-- profile role (0007/0008 grant SET, not INHERIT), so a REVOKE issued after the ownership transfer would be
-- a silent no-op ("no privileges could be revoked") and PUBLIC would keep EXECUTE.
REVOKE ALL ON FUNCTION poopypals_rotate_device(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION poopypals_erase_device() FROM PUBLIC;
REVOKE ALL ON FUNCTION poopypals_erase_user(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_rotate_device(uuid) TO poopypals_app;
GRANT EXECUTE ON FUNCTION poopypals_erase_device() TO poopypals_app;

GRANT CREATE ON SCHEMA public TO poopypals_profiles;
ALTER FUNCTION poopypals_rotate_device(uuid) OWNER TO poopypals_profiles;
ALTER FUNCTION poopypals_erase_device() OWNER TO poopypals_profiles;
ALTER FUNCTION poopypals_erase_user(text, boolean) OWNER TO poopypals_profiles;
REVOKE CREATE ON SCHEMA public FROM poopypals_profiles;

-- 0008 revoked PUBLIC's EXECUTE on poopypals_ensure_profile after handing it to the profile role, which is that
-- no-op on PostgreSQL 16+ (found by `monitor rls`'s SECURITY DEFINER check): done again, as the owner.
SET LOCAL ROLE poopypals_profiles;
REVOKE ALL ON FUNCTION poopypals_ensure_profile(uuid, text, boolean, text, boolean, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_ensure_profile(uuid, text, boolean, text, boolean, date) TO poopypals_app;
RESET ROLE;
