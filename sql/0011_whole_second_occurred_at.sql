-- Log times are kept to the whole second, the precision the API writes them in (`2026-11-23T10:00:00Z`): a value
-- read from the API and sent back (an idempotent replay, a sync upsert) is then the same value, never a 409.
-- The service rounds incoming times down to the second; this rounds existing rows down the same way.
--
-- Each changed row is a change for sync: the trigger of 0009 gives it a new change number, so phones pull the
-- rounded value. Row-level security is lifted for this transaction only, so the owner sees every device's rows
-- (and the trigger can count on their devices).
ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY;
ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
UPDATE poop_logs SET occurred_at = date_trunc('second', occurred_at)
WHERE occurred_at <> date_trunc('second', occurred_at);
ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY;
ALTER TABLE devices FORCE ROW LEVEL SECURITY;
