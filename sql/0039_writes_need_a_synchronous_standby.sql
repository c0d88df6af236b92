-- A write the service acknowledges is on two servers (README "High availability"), also in the second or two after a
-- failover: pg_auto_failover makes the promoted standby writable before it names its standbys (its wait_primary),
-- and a commit there is acknowledged with one copy; lost with that server. With POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY
-- set, every write transaction of the service calls this function in its context statement, first: on a server
-- whose synchronous_standby_names is empty, or in a session whose commits do not wait for a standby
-- (synchronous_commit off or local), it refuses (25006, as a read-only server would: nothing was done, the request
-- is tried again on a fresh connection and else answered 503 database_unavailable with Retry-After). The settings
-- are read by the transaction's first statement; a promoted primary only ever goes from no standby names to some,
-- so a transaction that passed commits with its standby (a formation that drops its standbys while a transaction
-- runs, number_sync_standbys 0, is not one this check covers: README).
--
-- Pre-deployment: 1.0.0 never calls it.
CREATE OR REPLACE FUNCTION poopypals_require_synchronous_standby() RETURNS boolean
    LANGUAGE plpgsql
-- No SET clause (a function with one costs its caller a configuration change on every call): what it calls is
-- named with its schema.
AS $$
BEGIN
    IF pg_catalog.current_setting('synchronous_standby_names') OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'this server has no synchronous standby: it takes no write until one follows it'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) ANY (ARRAY['off', 'local']) THEN
        RAISE EXCEPTION 'this session''s commits do not wait for a standby (synchronous_commit %)',
            pg_catalog.current_setting('synchronous_commit') USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    RETURN true;
END
$$;
