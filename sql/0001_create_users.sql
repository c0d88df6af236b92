-- Users. Real deployments already have a `users` table (often just id, email, full_name, role), so it is
-- created only if missing and then brought up to shape: missing columns are added, nothing is dropped.
CREATE TABLE IF NOT EXISTS users (
    id uuid PRIMARY KEY,
    email text NOT NULL,
    full_name text,
    role text NOT NULL DEFAULT 'student',
    date_of_birth date,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE users
    ADD COLUMN IF NOT EXISTS full_name text,
    ADD COLUMN IF NOT EXISTS role text DEFAULT 'student',
    ADD COLUMN IF NOT EXISTS date_of_birth date,
    ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();

ALTER TABLE users ALTER COLUMN email SET NOT NULL;
ALTER TABLE users ALTER COLUMN role SET DEFAULT 'student';

-- devices.user_id references users(id): a legacy table without a primary key gets one.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint WHERE conrelid = 'users'::regclass AND contype = 'p'
    ) THEN
        ALTER TABLE users ADD PRIMARY KEY (id);
    END IF;
END
$$;
