-- poopypals:no-transaction
-- poopypals:preflight duplicate-emails
-- One user row per email. Built online: the index is created without blocking writes, then attached as the
-- constraint (a short lock). Both steps can be re-run after a partial failure.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS users_email_unique ON users (email);

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint WHERE conrelid = 'users'::regclass AND conname = 'users_email_unique'
    ) THEN
        ALTER TABLE users ADD CONSTRAINT users_email_unique UNIQUE USING INDEX users_email_unique;
    END IF;
END
$$;
