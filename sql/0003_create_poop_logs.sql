CREATE TABLE poop_logs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    device_id uuid NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    occurred_at timestamptz NOT NULL,
    bristol_type smallint NOT NULL CONSTRAINT poop_logs_bristol_type_check CHECK (bristol_type BETWEEN 1 AND 7),
    notes text CONSTRAINT poop_logs_notes_length_check CHECK (char_length(notes) <= 2000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A device's newest logs first; id breaks ties so cursor pagination is stable.
CREATE INDEX poop_logs_device_occurred_idx ON poop_logs (device_id, occurred_at DESC, id DESC);
