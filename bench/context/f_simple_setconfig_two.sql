\set n random(1, 1000)
SELECT key::text AS k FROM ctx_keys WHERE n = :n \gset
BEGIN;
SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', ':k', true);
SELECT count(*) FROM poop_logs WHERE device_id = get_current_device_id();
COMMIT;
