-- Profiles: one normalised email per user, and what the service role may do with users.

-- No path may store an email that is not trimmed and lower-cased. NOT VALID so that adopting a legacy table
-- with dirty data does not fail here: new and updated rows are checked at once, and the constraint is
-- validated below when existing rows already comply (otherwise by `poopypals users merge-duplicates`).
ALTER TABLE users ADD CONSTRAINT users_email_normalized
    CHECK (email = lower(email) AND email = btrim(email) AND email LIKE '_%@_%') NOT VALID;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM users WHERE NOT (email = lower(email) AND email = btrim(email) AND email LIKE '_%@_%')
    ) THEN
        ALTER TABLE users VALIDATE CONSTRAINT users_email_normalized;
    END IF;
END
$$;

-- The service role reads users and creates profiles, but can never choose or change a role, an id or an
-- email: those columns are not granted for writing.
GRANT SELECT ON users TO poopypals_app;
GRANT INSERT (id, email, full_name, date_of_birth) ON users TO poopypals_app;
GRANT UPDATE (full_name, date_of_birth, updated_at) ON users TO poopypals_app;
