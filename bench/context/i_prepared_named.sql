\set n random(1, 1000)
SELECT key::text AS k, id::text AS i FROM ctx_keys WHERE n = :n \gset
\startpipeline
BEGIN;
SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', :k, true), set_config('statement_timeout', '5000', true), set_config('lock_timeout', '2000', true), set_config('idle_in_transaction_session_timeout', '10000', true), set_config('poopypals.max_logs_per_device', '100000', true), set_config('poopypals.max_tombstones_per_device', '100000', true), set_config('poopypals.device_write_burst', '600', true), set_config('poopypals.device_write_rate', '10', true);
SELECT count(*) FROM poop_logs WHERE device_id = :i;
COMMIT;
\endpipeline
