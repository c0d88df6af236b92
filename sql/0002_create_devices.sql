-- A device is identified by its id alone (generated on the phone, treated like a password).
CREATE TABLE devices (
    id uuid PRIMARY KEY,
    user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    model text CONSTRAINT devices_model_length CHECK (char_length(model) <= 100),
    os_version text CONSTRAINT devices_os_version_length CHECK (char_length(os_version) <= 50),
    app_version text CONSTRAINT devices_app_version_length CHECK (char_length(app_version) <= 50),
    build_number text CONSTRAINT devices_build_number_length CHECK (char_length(build_number) <= 50),
    is_simulator boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX devices_user_id_idx ON devices (user_id);
