-- Issue 58: the registration limit's buckets (sql/0015, 0027) kept every registering network under a key anyone
-- could reverse (SHA-256 of a public prefix and the address: the IPv4 space is 2^32 digests), and kept it forever.
--
-- - The service now keys a bucket with HMAC-SHA-256 under a secret the database does not hold (RateLimits.networkKey;
--   README "One client cannot take the service from others"). The rows keyed the old way are deleted here: their
--   buckets restart full. Instances of release 1.0.0 still serving during a rolling upgrade keep writing rows keyed
--   the old way (and count their registrations apart from 1.1.0's until they are replaced); each of those is
--   deleted once it has refilled, as below.
-- - A bucket that has refilled to its burst says nothing a missing row does not: poopypals_forget_full_registration_buckets
--   deletes those (`poopypals maintenance`, and every instance's background work each minute). The table then holds
--   only networks that registered within the last refill window (burst / rate: 15 minutes by default).
-- - IPv6: beside its /64's bucket, a registration takes a token of its /48's (`wide`), with a burst and rate of
--   their own, so that one allocation cannot register 65 536 × 30 devices. A second form of
--   poopypals_register_device takes the /48's key and limits; 1.0.0 keeps calling the first, unchanged.
--
-- What 1.0.0 uses is unchanged: poopypals_register_device's nine-argument form, the table's columns (a new one has a
-- default), its grants.

-- The functions first, as their owner (the profile role), with Citus's DDL propagation off where Citus is: the
-- coordinator runs them (0029, 0033); sent to the workers, their creation was refused there ("permission denied for
-- schema public"). The table's changes come after them (PL/pgSQL reads `wide` only when it runs), propagated.
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', poopypals_profiles_role());
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    PERFORM set_config('role', poopypals_profiles_role(), true);
END
$$;

-- One token of an IPv6 /48's bucket, as poopypals_take_registration takes one of a network's. p_network: the /48's
-- key (hex); empty: no bucket. Internal: run by poopypals_register_device's second form, as the profile role.
CREATE FUNCTION poopypals_take_wide_registration(p_network text, p_burst double precision, p_rate double precision) RETURNS void
    LANGUAGE plpgsql
    VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    burst constant double precision := coalesce(p_burst, 300);
    rate constant double precision := coalesce(p_rate, 1.0 / 3);
    left_over double precision;
    -- Citus takes only immutable functions in an upsert's DO UPDATE: the time is a value.
    at constant timestamptz := now();
BEGIN
    IF coalesce(p_network, '') = '' THEN
        RETURN;
    END IF;
    INSERT INTO public.registration_buckets AS b (network, tokens, refilled_at, wide) VALUES (decode(p_network, 'hex'), burst - 1, at, true)
    ON CONFLICT (network) DO UPDATE
        SET tokens = least(burst, b.tokens + greatest(0, extract(epoch FROM at - b.refilled_at)) * rate) - 1,
            refilled_at = at
    RETURNING b.tokens INTO left_over;
    IF left_over < 0 THEN
        RAISE EXCEPTION 'too many devices registered from this network' USING ERRCODE = 'PPR02',
            DETAIL = ceil(-left_over / greatest(rate, 0.0000001))::bigint::text;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION poopypals_take_wide_registration(text, double precision, double precision) FROM PUBLIC;

-- Registration (0033's), and for a device really created also a token of the /48's bucket: refused (PPR02), the
-- whole statement is undone, the device with it.
CREATE FUNCTION poopypals_register_device(
    p_model text, p_os_version text, p_app_version text, p_build_number text, p_is_simulator boolean,
    p_create boolean, p_network text, p_burst double precision, p_rate double precision,
    p_wide_network text, p_wide_burst double precision, p_wide_rate double precision
) RETURNS TABLE (
    outcome text, user_id uuid, model text, os_version text, app_version text, build_number text,
    is_simulator boolean, created_at timestamptz, last_seen_at timestamptz
)
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    registered record;
BEGIN
    FOR registered IN
        SELECT * FROM public.poopypals_register_device(p_model, p_os_version, p_app_version, p_build_number, p_is_simulator,
                                                       p_create, p_network, p_burst, p_rate)
    LOOP
        IF registered.outcome = 'created' THEN
            PERFORM public.poopypals_take_wide_registration(p_wide_network, p_wide_burst, p_wide_rate);
        END IF;
        outcome := registered.outcome;
        user_id := registered.user_id;
        model := registered.model;
        os_version := registered.os_version;
        app_version := registered.app_version;
        build_number := registered.build_number;
        is_simulator := registered.is_simulator;
        created_at := registered.created_at;
        last_seen_at := registered.last_seen_at;
        RETURN NEXT;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION poopypals_register_device(text, text, text, text, boolean, boolean, text, double precision, double precision,
                                                 text, double precision, double precision) FROM PUBLIC;

-- Deletes every bucket that has refilled to its burst (a /64's or an IPv4 address's with p_burst and p_rate, a /48's
-- with p_wide_burst and p_wide_rate): such a row holds nothing a missing one does not. Returns how many.
CREATE FUNCTION poopypals_forget_full_registration_buckets(
    p_burst double precision, p_rate double precision, p_wide_burst double precision, p_wide_rate double precision
) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- Citus takes no volatile function in a modification of a reference table: the time is a value.
    at constant timestamptz := now();
    forgotten bigint;
BEGIN
    DELETE FROM public.registration_buckets b
    WHERE b.tokens + greatest(0, extract(epoch FROM at - b.refilled_at))
                     * CASE WHEN b.wide THEN coalesce(p_wide_rate, 1.0 / 3) ELSE coalesce(p_rate, 1.0 / 30) END
          >= CASE WHEN b.wide THEN coalesce(p_wide_burst, 300) ELSE coalesce(p_burst, 30) END;
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    RETURN forgotten;
END
$$;
REVOKE ALL ON FUNCTION poopypals_forget_full_registration_buckets(double precision, double precision, double precision, double precision) FROM PUBLIC;

-- Granted by their owner (the profile role; PostgreSQL 16+ gives the migrating owner no right to grant on the
-- role's objects otherwise), then back to the migrating role.
DO $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION poopypals_register_device(text, text, text, text, boolean, boolean, text, double precision, double precision, text, double precision, double precision) TO %I',
                   poopypals_service_role());
    EXECUTE format('GRANT EXECUTE ON FUNCTION poopypals_forget_full_registration_buckets(double precision, double precision, double precision, double precision) TO %I',
                   poopypals_service_role());
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', poopypals_profiles_role());
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
END
$$;

DELETE FROM registration_buckets;

ALTER TABLE registration_buckets ADD COLUMN wide boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN registration_buckets.wide IS
    'A bucket of an IPv6 /48 (the wider limit), not of a /64 or an IPv4 address.';

DO $$
BEGIN
    EXECUTE format('GRANT DELETE ON registration_buckets TO %I', poopypals_profiles_role());
END
$$;
