-- Issue 45 (docs/scaling.md, "the request names its device"): the service's statements name their device's id
-- (devices.id) as a bound value, instead of finding it through devices by the key. On Citus a statement is routed to
-- one shard only by a constant of the distribution column; a sub-select by key there is refused in an INSERT,
-- turns an INSERT … SELECT into a COPY (refused under row-level security), and runs a read on every shard.
--
-- The service keeps the id of each key it has served (bounded, per instance). A kept id can go stale when its key
-- comes to stand for another device (registered again after an erasure ended, or rotated to) or for none: the
-- request's context then asks this function, in the same round trip, whether the key still stands for the id it
-- names. When it does not, the function raises PPD01 before any statement of the request has run; the service
-- forgets the id, looks the key up again and runs the request once more. A wrong id could not reach another
-- device's rows anyway (every policy compares the row's device with the key's own): the check keeps a read from
-- answering "nothing" to the right device.
--
-- The caller's own rights (a device reads its own map row only); no table of its own; a plain function call, which
-- Citus runs on the coordinator.
CREATE FUNCTION poopypals_device_is(p_id uuid) RETURNS boolean
    LANGUAGE plpgsql
    STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF public.get_current_device_id() IS DISTINCT FROM p_id THEN
        RAISE EXCEPTION 'the device id kept for this key is out of date' USING ERRCODE = 'PPD01';
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION poopypals_device_is(uuid) IS
    'True when the request''s key (app.device_id) stands for this device id; else SQLSTATE PPD01 (sql/0030).';
