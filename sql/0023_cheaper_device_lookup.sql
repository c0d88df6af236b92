-- The device of the transaction, found at a price paid once per session, not per statement (measured: `make bench`
-- after 0021 showed PostgreSQL's CPU per GET /v1/logs doubled; pgbench of the list transaction, 8 clients:
-- 6 270 tps with these as in 0021, 9 456 with these).
--
-- 0021's get_current_device_id() was a SQL function with a SET clause: PostgreSQL cannot inline such a function,
-- and plans its query again each time a statement calls it (a SQL function's plan lives only as long as the
-- calling statement), with row-level security on devices to expand, and get_current_device_key() inside it the
-- same way. Every policy check and every repository statement paid that. Now:
--   get_current_device_key()  plain SQL without SET: inlined where it is used, so it costs what its expression costs;
--   get_current_device_id()   PL/pgSQL: its one query is planned once per session and reused.
-- Neither is SECURITY DEFINER, so no SET search_path is needed for safety: every name and operator is
-- schema-qualified (pg_catalog's), so a caller's search_path cannot change what they do.

CREATE OR REPLACE FUNCTION get_current_device_key() RETURNS uuid
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('app.device_id', true) OPERATOR(pg_catalog.=) '' THEN NULL
                ELSE pg_catalog.current_setting('app.device_id', true)::pg_catalog.uuid END
$$;
ALTER FUNCTION get_current_device_key() RESET ALL;

CREATE OR REPLACE FUNCTION get_current_device_id() RETURNS uuid
    LANGUAGE plpgsql
    STABLE
    PARALLEL SAFE
AS $$
BEGIN
    RETURN (SELECT d.id FROM public.devices d
            WHERE d.key OPERATOR(pg_catalog.=) public.get_current_device_key() AND d.erasing_since IS NULL);
END
$$;
ALTER FUNCTION get_current_device_id() RESET ALL;

-- The insert trigger of 0014 looks for tombstones of the inserted ids only when the device has any (its
-- tombstone_count): most writes are of new ids on devices without tombstones, and paid an index probe per row for
-- nothing (pgbench of the create transaction, 8 clients: 4 049 → about 4 210 tps). A re-created id still clears its
-- tombstone (SyncTests, QuotaTests).
CREATE OR REPLACE FUNCTION poop_logs_count_inserts() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    quota bigint := coalesce(nullif(current_setting('poopypals.max_logs_per_device', true), '')::bigint, 100000);
    most bigint;
    any_tombstones boolean;
BEGIN
    WITH added AS (
        SELECT device_id, count(*) AS n FROM inserted GROUP BY device_id
    ), counted AS (
        UPDATE public.devices d SET log_count = d.log_count + a.n
        FROM added a WHERE d.id = a.device_id
        RETURNING d.log_count, d.tombstone_count > 0 AS has_tombstones
    )
    SELECT max(c.log_count), bool_or(c.has_tombstones) INTO most, any_tombstones FROM counted c;
    IF most > quota THEN
        RAISE EXCEPTION 'a device may hold at most % logs', quota USING ERRCODE = 'PPQ01';
    END IF;
    IF any_tombstones THEN
        WITH revived AS (
            DELETE FROM public.poop_log_tombstones t USING inserted i WHERE t.device_id = i.device_id AND t.id = i.id
            RETURNING t.device_id
        ), revived_per_device AS (
            SELECT r.device_id, count(*) AS n FROM revived r GROUP BY r.device_id
        )
        UPDATE public.devices d SET tombstone_count = d.tombstone_count - r.n FROM revived_per_device r WHERE d.id = r.device_id;
    END IF;
    RETURN NULL;
END
$$;
