-- Issue 45, step 1 (docs/scaling.md, "Sharding by device"): the device of the transaction is found in a table of
-- its own, device_key_map (key → id), not in devices. On one PostgreSQL nothing changes but where the lookup reads;
-- on Citus it is what makes the lookup possible at all: devices will be distributed by id, so a worker has only
-- its shards of it (the lookup there read an empty shell and answered NULL, measured), and devices cannot keep a
-- unique key that is not its distribution column. The map becomes a reference table there (a copy on every node).
--
-- The map holds a row for every device that is not being erased, and only those: get_current_device_id() now
-- reads it alone (the erasing_since test moves into what the map holds). A trigger on devices keeps it, so every
-- path that changes a device's key or erasure keeps it without a change to any repository: registration
-- (INSERT), rotation (UPDATE OF key, in the profile role's function), the start of an erasure (UPDATE OF
-- erasing_since), the device's deletion. Re-registering an existing device (ON CONFLICT DO UPDATE of other
-- columns) and every log write (the device-row update of 0024) do not fire it.
--
-- Its columns are key and id, not device_id: a table with device_id is a device's table to `poopypals monitor
-- rls`, whose four policies compare device_id with get_current_device_id(), which reads this table (a policy
-- calling itself). Its own policies, written as plain calls (Citus refuses a sub-select in a policy): a device
-- reads only the row of its own key; the profile role keeps any row. Only the trigger writes the map, as the
-- profile role (SECURITY DEFINER): the service role may not insert or delete a row of it, not even one for its
-- own key, since a row names the device a key stands for (a fresh key pointed at another device's id would be
-- that device to every policy; the same reason the service role may not choose devices.id, 0021).
--
-- Devices are locked against writes first, until this transaction commits, so the map is filled from every
-- committed device and no registration slips between the fill and the trigger (the migrator's lock timeout and
-- retry bound the wait).

LOCK TABLE devices IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE device_key_map (
    key uuid PRIMARY KEY,
    id uuid NOT NULL UNIQUE
);
COMMENT ON TABLE device_key_map IS 'The device of each key, for devices not being erased (sql/0026): what get_current_device_id() reads.';
ALTER TABLE device_key_map ENABLE ROW LEVEL SECURITY;
ALTER TABLE device_key_map FORCE ROW LEVEL SECURITY;
CREATE POLICY "Devices can read own key" ON device_key_map FOR SELECT USING (key = get_current_device_key());

-- The trigger function belongs to the profile role, which keeps the map (its policy, its grants).
DO $$
BEGIN
    EXECUTE format('CREATE POLICY "Profiles keep the key map" ON device_key_map FOR ALL TO %I USING (current_user = %L) WITH CHECK (current_user = %L)',
                   poopypals_profiles_role(), poopypals_profiles_role(), poopypals_profiles_role());
    EXECUTE format('GRANT SELECT ON device_key_map TO %I', poopypals_service_role());
    EXECUTE format('GRANT SELECT, INSERT, DELETE ON device_key_map TO %I', poopypals_profiles_role());
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

CREATE FUNCTION devices_keep_key_map() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM public.device_key_map m WHERE m.id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.erasing_since IS NULL THEN
        INSERT INTO public.device_key_map (key, id) VALUES (NEW.key, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

-- Filled as the profile role, which reads every device and keeps any row of the map: row-level security stays
-- forced for the owner throughout (as in 0020).
INSERT INTO public.device_key_map (key, id) SELECT d.key, d.id FROM public.devices d WHERE d.erasing_since IS NULL;

RESET ROLE;
CREATE TRIGGER devices_keep_key_map AFTER INSERT OR UPDATE OF key, erasing_since OR DELETE ON devices
    FOR EACH ROW EXECUTE FUNCTION devices_keep_key_map();
-- A trigger's function is not checked for EXECUTE when it fires: nobody needs to call it.
DO $$
BEGIN
    PERFORM set_config('role', poopypals_profiles_role(), true);
    REVOKE ALL ON FUNCTION devices_keep_key_map() FROM PUBLIC;
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
END
$$;

CREATE OR REPLACE FUNCTION get_current_device_id() RETURNS uuid
    LANGUAGE plpgsql
    STABLE
    PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT m.id FROM public.device_key_map m WHERE m.key OPERATOR(pg_catalog.=) public.get_current_device_key());
END
$$;
