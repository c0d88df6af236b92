-- Rotation and erasure in time independent of the device's size (issue 41, item 4), step 2 of 2 (0020 added and
-- filled the key column). From here on:
--   devices.id   the device's stable internal id: its logs, tombstones and change numbers point at it, and it
--                never changes (new devices get a random one). It is never sent to a client.
--   devices.key  the one-way key of the id the phone holds (sql/0010); `app.device_id` holds it, and the
--                device is found by it. Rotating a device is a one-row update of this column.
-- get_current_device_key() reads `app.device_id`; get_current_device_id() is still "the device of the current
-- transaction", now the internal id of the registered device with that key, so every policy keyed on it (logs,
-- tombstones, users) stands as written. A device being erased has no current device id: its id works for nothing
-- but following its erasure.
--
-- Erasure in batches: DELETE /v1/device stops the device at once (erasing_since, the profile's fate decided in
-- that transaction) and deletes up to a batch of its logs; the rest are deleted a batch per transaction by
-- poopypals_erase_pending() (the service runs it in the background, `poopypals maintenance` too), and the device
-- row goes with the last batch. Deleting an erased device's logs leaves no tombstones and takes no write tokens.

ALTER TABLE devices ALTER COLUMN key SET NOT NULL;  -- no scan: 0020's validated check proves it
ALTER TABLE devices DROP CONSTRAINT devices_key_present;
ALTER TABLE devices ADD CONSTRAINT devices_key_key UNIQUE USING INDEX devices_key_key;
ALTER TABLE devices ALTER COLUMN id SET DEFAULT gen_random_uuid();
DROP TRIGGER devices_key_follows_id ON devices;
DROP FUNCTION devices_key_follows_id();

CREATE FUNCTION get_current_device_key() RETURNS uuid
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT NULLIF(current_setting('app.device_id', true), '')::uuid
$$;

-- Read under the caller's row-level security: the service role sees only the row with its key (below).
CREATE OR REPLACE FUNCTION get_current_device_id() RETURNS uuid
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id FROM public.devices d WHERE d.key = public.get_current_device_key() AND d.erasing_since IS NULL
$$;

GRANT EXECUTE ON FUNCTION get_current_device_key() TO poopypals_app, poopypals_profiles;

-- A device sees, registers, changes and deletes only the row with its key, and not once its erasure began.
DROP POLICY "Devices can read own data" ON devices;
DROP POLICY "Devices can insert own data" ON devices;
DROP POLICY "Devices can update own data" ON devices;
DROP POLICY "Devices can delete own data" ON devices;
CREATE POLICY "Devices can read own data" ON devices
    FOR SELECT USING (key = (SELECT get_current_device_key()) AND erasing_since IS NULL);
CREATE POLICY "Devices can insert own data" ON devices
    FOR INSERT WITH CHECK (key = (SELECT get_current_device_key()) AND erasing_since IS NULL);
CREATE POLICY "Devices can update own data" ON devices
    FOR UPDATE USING (key = (SELECT get_current_device_key()) AND erasing_since IS NULL)
    WITH CHECK (key = (SELECT get_current_device_key()) AND erasing_since IS NULL);
CREATE POLICY "Devices can delete own data" ON devices
    FOR DELETE USING (key = (SELECT get_current_device_key()) AND erasing_since IS NULL);

-- The service registers a device by its key; the internal id is the database's to choose, and nobody moves it.
REVOKE INSERT (id) ON devices FROM poopypals_app;
GRANT INSERT (key) ON devices TO poopypals_app;
REVOKE UPDATE (id) ON devices FROM poopypals_profiles;
GRANT UPDATE (key, erasing_since) ON devices TO poopypals_profiles;

-- The profile role deletes the logs of a device being erased, and nothing else's.
GRANT DELETE ON poop_logs TO poopypals_profiles;
CREATE POLICY "Profiles can read logs of erased devices" ON poop_logs FOR SELECT TO poopypals_profiles
    USING (current_user = 'poopypals_profiles'
           AND device_id IN (SELECT d.id FROM devices d WHERE d.erasing_since IS NOT NULL));
CREATE POLICY "Profiles can erase logs of erased devices" ON poop_logs FOR DELETE TO poopypals_profiles
    USING (current_user = 'poopypals_profiles'
           AND device_id IN (SELECT d.id FROM devices d WHERE d.erasing_since IS NOT NULL));

-- The row trigger of 0015. A log written with no device (get_current_device_id() found none: not registered, or
-- being erased) is refused here as the foreign key refused it before (23503), ahead of row-level security's 42501.
-- An erased device's logs are deleted without a change number, a tombstone or a write token. Logs never move
-- between devices any more, so 0010's exception for a moved log is gone.
CREATE OR REPLACE FUNCTION poop_logs_track_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst double precision := coalesce(nullif(current_setting('poopypals.device_write_burst', true), '')::double precision, 2000);
    rate double precision := coalesce(nullif(current_setting('poopypals.device_write_rate', true), '')::double precision, 20);
    device uuid;
    seq bigint;
    tokens double precision;
BEGIN
    device := CASE WHEN TG_OP = 'DELETE' THEN OLD.device_id ELSE NEW.device_id END;
    IF device IS NULL THEN
        RAISE EXCEPTION 'this device is not registered' USING ERRCODE = 'foreign_key_violation';
    END IF;
    UPDATE public.devices
    SET change_seq = change_seq + 1,
        write_tokens = least(burst, coalesce(write_tokens + greatest(0, extract(epoch FROM now() - write_tokens_at)) * rate, burst)) - 1,
        write_tokens_at = now()
    WHERE id = device AND erasing_since IS NULL
    RETURNING change_seq, write_tokens INTO seq, tokens;
    IF tokens < 0 THEN
        RAISE EXCEPTION 'this device writes faster than its limit' USING ERRCODE = 'PPR01',
            DETAIL = ceil(-tokens / greatest(rate, 0.0001))::bigint::text;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF seq IS NOT NULL THEN
            INSERT INTO public.poop_log_tombstones (device_id, id, change_seq) VALUES (OLD.device_id, OLD.id, seq)
            ON CONFLICT (device_id, id) DO UPDATE SET change_seq = EXCLUDED.change_seq, deleted_at = now();
        END IF;
        RETURN OLD;
    END IF;
    -- Not the calling device's row: leave it as it is, and let row-level security (42501) refuse it.
    NEW.change_seq := coalesce(seq, NEW.change_seq, 0);
    RETURN NEW;
END
$$;

-- The statement trigger of 0014: an erased device's deleted logs stop counting and leave no tombstones to count.
CREATE OR REPLACE FUNCTION poop_logs_count_deletes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    quota bigint := coalesce(nullif(current_setting('poopypals.max_tombstones_per_device', true), '')::bigint, 20000);
    most bigint;
BEGIN
    WITH removed AS (
        SELECT device_id, count(*) AS n FROM deleted GROUP BY device_id
    ), counted AS (
        UPDATE public.devices d SET log_count = d.log_count - r.n,
                                    tombstone_count = d.tombstone_count + CASE WHEN d.erasing_since IS NULL THEN r.n ELSE 0 END
        FROM removed r WHERE d.id = r.device_id
        RETURNING d.tombstone_count, d.erasing_since IS NULL AS live
    )
    -- A device being erased is not held to the quota: its tombstones do not grow, and an erasure must finish
    -- whatever the quota (a lower one set since, or the tools' default) says.
    SELECT max(c.tombstone_count) FILTER (WHERE c.live) INTO most FROM counted c;
    IF most > quota THEN
        RAISE EXCEPTION 'a device may have at most % deleted logs awaiting purge', quota USING ERRCODE = 'PPQ02';
    END IF;
    RETURN NULL;
END
$$;

-- Functions of the profile role are replaced or created as that role (0013); EXECUTE is taken from PUBLIC while
-- this login still owns a new one (0010 explains why).
GRANT CREATE ON SCHEMA public TO poopypals_profiles;

-- Up to p_batch logs of a device being erased; the device row (and by cascade its tombstones) with the last of
-- them. Internal: run by the functions below, as the profile role.
CREATE FUNCTION poopypals_erase_batch(p_device uuid, p_batch integer) RETURNS TABLE (removed bigint, remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    left_over bigint;
BEGIN
    DELETE FROM public.poop_logs l
    WHERE l.device_id = p_device
      AND l.id IN (SELECT b.id FROM public.poop_logs b WHERE b.device_id = p_device LIMIT p_batch);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF NOT EXISTS (SELECT FROM public.poop_logs l WHERE l.device_id = p_device) THEN
        DELETE FROM public.devices d WHERE d.id = p_device AND d.erasing_since IS NOT NULL;
        RETURN QUERY SELECT n, 0::bigint;
        RETURN;
    END IF;
    SELECT greatest(d.log_count, 1) INTO left_over FROM public.devices d WHERE d.id = p_device;
    RETURN QUERY SELECT n, left_over;
END
$$;
REVOKE ALL ON FUNCTION poopypals_erase_batch(uuid, integer) FROM PUBLIC;
ALTER FUNCTION poopypals_erase_batch(uuid, integer) OWNER TO poopypals_profiles;

-- Erasure of the calling device (replaces 0017's). The first call stops the device (its id is from then on an
-- unknown device to every route, and cannot be registered again until the erasure ends), unlinks its profile and
-- erases that too when p_subject (proved by the caller's token) is its owner and no other device links to it;
-- every call deletes up to p_batch logs. logs: deleted by this call; logs_remaining: 0 when the device is gone.
-- erased false: no device with this key (never registered, or erased to the end).
CREATE FUNCTION poopypals_erase_device(p_subject uuid, p_batch integer)
    RETURNS TABLE (erased boolean, logs bigint, profile_erased boolean, logs_remaining bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    device_key constant uuid := public.get_current_device_key();
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
    SELECT * INTO device FROM public.devices d WHERE d.key = device_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false, 0::bigint;
        RETURN;
    END IF;
    IF device.erasing_since IS NULL THEN
        IF device.user_id IS NOT NULL THEN
            PERFORM FROM public.users u WHERE u.id = device.user_id FOR UPDATE;
        END IF;
        UPDATE public.devices d SET erasing_since = clock_timestamp(), user_id = NULL WHERE d.id = device.id;
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
REVOKE ALL ON FUNCTION poopypals_erase_device(uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_erase_device(uuid, integer) TO poopypals_app;
ALTER FUNCTION poopypals_erase_device(uuid, integer) OWNER TO poopypals_profiles;
DROP FUNCTION poopypals_erase_device(uuid);

-- One batch of the oldest erasure nobody else is working on. erasing: devices still being erased afterwards.
CREATE FUNCTION poopypals_erase_pending(p_batch integer) RETURNS TABLE (erasing bigint, logs bigint)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target uuid;
    n bigint := 0;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'the batch must hold at least one log' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT d.id INTO target FROM public.devices d WHERE d.erasing_since IS NOT NULL
    ORDER BY d.erasing_since LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        SELECT b.removed INTO n FROM public.poopypals_erase_batch(target, p_batch) b;
    END IF;
    RETURN QUERY SELECT (SELECT count(*) FROM public.devices d WHERE d.erasing_since IS NOT NULL), n;
END
$$;
REVOKE ALL ON FUNCTION poopypals_erase_pending(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION poopypals_erase_pending(integer) TO poopypals_app;
ALTER FUNCTION poopypals_erase_pending(integer) OWNER TO poopypals_profiles;

SET LOCAL ROLE poopypals_profiles;

-- Rotation (replaces 0010's): the calling device's key changes; its internal id, logs, tombstones, profile link
-- and change numbers stay where they are. One row, whatever the device holds.
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
    SELECT d.id INTO device FROM public.devices d WHERE d.key = device_key AND d.erasing_since IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        result := 'not_registered';
    ELSIF p_new_key = device_key OR EXISTS (SELECT FROM public.devices d WHERE d.key = p_new_key) THEN
        result := 'in_use';
    ELSE
        BEGIN
            UPDATE public.devices d SET key = p_new_key, last_seen_at = now() WHERE d.id = device;
        EXCEPTION WHEN unique_violation THEN
            -- Registered by a concurrent transaction since the check above.
            result := 'in_use';
        END;
    END IF;
    -- One row: the outcome, with the device under its new key when it moved (NULLs otherwise).
    RETURN QUERY SELECT result, d.key, d.user_id, d.model, d.os_version, d.app_version, d.build_number,
                        d.is_simulator, d.created_at, d.last_seen_at
                 FROM (SELECT) AS one LEFT JOIN public.devices d ON result = 'rotated' AND d.id = device;
END
$$;

-- Erasure by email (replaces 0010's): the logs are counted from the devices' own counts (0014).
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
        DELETE FROM public.devices d WHERE d.user_id = target;
        DELETE FROM public.users u WHERE u.id = target;
    END IF;
    RETURN QUERY SELECT 1, device_count, log_count;
END
$$;

-- ensure_profile (0016's), with "no device" told apart from "not registered" by the key: P0002 for a device that
-- is not registered (or is being erased), as before.
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
    -- Locked: a concurrent re-link of the same device waits, and then sees this one's link. A device whose erasure
    -- committed meanwhile no longer qualifies (the lock re-reads the row): not registered, and no profile is made
    -- or linked for it after its erasure said the profile was gone.
    SELECT d.user_id INTO linked FROM public.devices d WHERE d.id = device AND d.erasing_since IS NULL FOR UPDATE;
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
