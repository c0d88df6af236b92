-- Issue 45 (docs/scaling.md, "Sharding by device"): on a Citus coordinator with worker nodes, the schema is
-- distributed by device. Anywhere else (plain PostgreSQL, or Citus with no node to hold shards) nothing happens.
--
-- - devices, poop_logs, poop_log_tombstones: distributed by the device's stored id (devices.id, the logs'
--   device_id), co-located, so that a device's rows and the log trigger's update of its device row are on one
--   shard. Shards: `citus.shard_count` of the migrating session (Citus's default, 32, unless set before migrating).
--   devices loses its unique key on `key` (Citus keeps unique keys on the distribution column only): the key map
--   holds one row per key (its primary key), and registration takes that row first. The logs' and tombstones' keys
--   to devices are added again with ON DELETE CASCADE only (Citus refuses ON UPDATE CASCADE on a distribution
--   column; ids are stable since 0021).
-- - users, device_key_map, registration_buckets: reference tables, a copy on every node (a device's policies read
--   the map on the shard's node; the profile's user is any node's).
-- - The log trigger writes the co-located device row on its shard: created with citus.enable_unsafe_triggers.
-- - get_current_device_id() and get_current_device_user_id() read the map from inside a shard's query: they alone
--   allow nested distributed execution.
-- - The service roles can log in: Citus opens its connections to the workers as the role a transaction switched
--   to. Without a password: `scripts/citus.sh` lets the nodes reach each other only through a socket folder of the
--   cluster's own user; across machines, certificates or pg_dist_authinfo per role (docs/scaling.md).
-- - The erasure of a device and by email look over every shard and then delete a user (a reference table): one
--   connection per node (multi_shard_modify_mode sequential), or Citus refuses ("cannot modify table users because
--   there was a parallel operation on a distributed table").
--
-- The same steps as `CitusTests…Distributed`, which ran a device's whole life on them before they became this
-- migration.
DO $$
DECLARE
    app constant text := poopypals_service_role();
    profiles constant text := poopypals_profiles_role();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    -- Citus's own catalog from here on: PL/pgSQL plans a statement when it first runs it, so plain PostgreSQL never does.
    IF NOT (SELECT EXISTS (SELECT 1 FROM pg_dist_node WHERE isactive AND noderole = 'primary' AND shouldhaveshards)) THEN
        RAISE NOTICE 'citus is installed but no node holds shards: the schema stays on the coordinator';
        RETURN;
    END IF;
    ALTER TABLE devices DROP CONSTRAINT devices_key_key;
    ALTER TABLE poop_logs DROP CONSTRAINT poop_logs_device_id_fkey;
    ALTER TABLE poop_log_tombstones DROP CONSTRAINT poop_log_tombstones_device_id_fkey;
    PERFORM create_reference_table('users');
    PERFORM create_reference_table('device_key_map');
    PERFORM create_reference_table('registration_buckets');
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    PERFORM create_distributed_table('devices', 'id');
    PERFORM create_distributed_table('poop_logs', 'device_id', colocate_with => 'devices');
    PERFORM create_distributed_table('poop_log_tombstones', 'device_id', colocate_with => 'devices');
    ALTER TABLE poop_logs ADD CONSTRAINT poop_logs_device_id_fkey
        FOREIGN KEY (device_id) REFERENCES devices (id) ON DELETE CASCADE;
    ALTER TABLE poop_log_tombstones ADD CONSTRAINT poop_log_tombstones_device_id_fkey
        FOREIGN KEY (device_id) REFERENCES devices (id) ON DELETE CASCADE;
    ALTER FUNCTION get_current_device_id() SET citus.allow_nested_distributed_execution = on;
    ALTER FUNCTION get_current_device_user_id() SET citus.allow_nested_distributed_execution = on;
    EXECUTE format('ALTER ROLE %I LOGIN', app);
    EXECUTE format('ALTER ROLE %I LOGIN', profiles);
    -- The erasure functions are the profile role's: altered as it, on the coordinator (where Citus runs them).
    PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    PERFORM set_config('role', profiles, true);
    ALTER FUNCTION poopypals_erase_device(uuid, integer) SET citus.multi_shard_modify_mode = 'sequential';
    ALTER FUNCTION poopypals_erase_user(text, boolean) SET citus.multi_shard_modify_mode = 'sequential';
    PERFORM set_config('role', 'none', true);
    PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
END
$$;
