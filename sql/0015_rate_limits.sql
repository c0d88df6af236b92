-- Rate limits shared by every instance (issue 41), kept where the instances meet and in the same round trip as the
-- work they guard: nothing limited how fast one anonymous client writes or how many devices it registers.
--
-- Writes per device: a token bucket on the device row, which every log write already updates (its change
-- counter, 0009). Each inserted, updated or deleted log takes a token; the bucket holds
-- `poopypals.device_write_burst` tokens (default 2 000) and refills at `poopypals.device_write_rate` a second
-- (default 20), both set by the service in every request transaction. Past it the statement fails with SQLSTATE
-- PPR01, DETAIL the seconds to wait: nothing of the request is stored.
--
-- Registrations per client network: a token bucket per network (`registration_buckets`), keyed by a SHA-256 of the
-- network the service names (`poopypals.client_network`, hex; the address itself is never stored), taken by each
-- device really inserted (an AFTER INSERT row trigger: a re-registration, ON CONFLICT DO UPDATE, costs nothing).
-- `poopypals.registration_burst` (default 30) and `poopypals.registration_rate` a second (default 1/30). Past it:
-- SQLSTATE PPR02, DETAIL the seconds to wait. Without `poopypals.client_network` (the tools, tests of the data
-- layer) no bucket is taken.

ALTER TABLE devices ADD COLUMN write_tokens double precision;  -- NULL: a full bucket
ALTER TABLE devices ADD COLUMN write_tokens_at timestamptz;
GRANT UPDATE (write_tokens, write_tokens_at) ON devices TO poopypals_app, poopypals_profiles;

-- The row trigger of 0014, taking a write token with the change number: one UPDATE of the device row, as before.
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
    IF TG_OP = 'UPDATE' AND NEW.device_id IS DISTINCT FROM OLD.device_id THEN
        RETURN NEW;
    END IF;
    device := CASE WHEN TG_OP = 'DELETE' THEN OLD.device_id ELSE NEW.device_id END;
    UPDATE public.devices
    SET change_seq = change_seq + 1,
        write_tokens = least(burst, coalesce(write_tokens + greatest(0, extract(epoch FROM now() - write_tokens_at)) * rate, burst)) - 1,
        write_tokens_at = now()
    WHERE id = device
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
    -- Not the calling device's row (or no such device): leave the row as it is, and let row-level security
    -- (42501) or the foreign key (23503) refuse it.
    NEW.change_seq := coalesce(seq, NEW.change_seq, 0);
    RETURN NEW;
END
$$;

CREATE TABLE registration_buckets (
    network bytea PRIMARY KEY,
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL
);
-- No device's data: no row-level security. The service role keeps the buckets through the trigger below.
GRANT SELECT, INSERT, UPDATE ON registration_buckets TO poopypals_app;

CREATE FUNCTION devices_take_registration() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    client_network text := nullif(current_setting('poopypals.client_network', true), '');
    burst double precision := coalesce(nullif(current_setting('poopypals.registration_burst', true), '')::double precision, 30);
    rate double precision := coalesce(nullif(current_setting('poopypals.registration_rate', true), '')::double precision, 1.0 / 30);
    left_over double precision;
BEGIN
    IF client_network IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO public.registration_buckets AS b (network, tokens, refilled_at) VALUES (decode(client_network, 'hex'), burst - 1, now())
    ON CONFLICT (network) DO UPDATE
        SET tokens = least(burst, b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * rate) - 1,
            refilled_at = now()
    RETURNING b.tokens INTO left_over;
    IF left_over < 0 THEN
        RAISE EXCEPTION 'too many devices registered from this network' USING ERRCODE = 'PPR02',
            DETAIL = ceil(-left_over / greatest(rate, 0.0000001))::bigint::text;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER devices_take_registration AFTER INSERT ON devices
    FOR EACH ROW EXECUTE FUNCTION devices_take_registration();
