-- poopypals:no-transaction
-- Issue 45, after a review of sql/0033: the key map indexed by user_id. 0033's erasure asks the map whether a
-- profile has another live device (`device_key_map.user_id`), where it asked devices (indexed by user_id since 0002):
-- without an index every erasure of a linked device read the whole map, holding its device's and profile's locks. It
-- also serves the foreign key's ON DELETE SET NULL when a profile is deleted. Built without blocking registrations
-- (CONCURRENTLY, outside a transaction; re-run safely: the migrator drops an index a failed build left INVALID).
CREATE INDEX CONCURRENTLY IF NOT EXISTS device_key_map_user_id ON device_key_map (user_id);
