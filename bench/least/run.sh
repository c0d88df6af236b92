#!/usr/bin/env bash
# Issue 44's targets against the least transaction its own guarantees allow (bench/README.md, "The least
# transaction"). For get, list 20 and create: PostgreSQL CPU per transaction from /proc (the postmaster and its
# children), pgbench -M prepared, 8 clients, 6 s a run, 3 rounds, on a scratch database `leastbench` of the local
# PostgreSQL 15 (scripts/db.sh), migrated, 1 000 devices with 30 logs each.
#
#   floor     the statement alone, autocommit, on bare copies (`floor.*`: same columns and indexes, no policy,
#             trigger or key check); the device found by its key in a bare copy of the key map, as the bench's
#             "database floor" section does
#   least     what no implementation keeping the issue's guarantees can leave out: one transaction (BEGIN, COMMIT,
#             pipelined) that calls set_config('app.device_id', key, true), the same statement on copies with
#             forced row-level security through get_current_device_id() (`least.*`) and, for create, the foreign
#             key to the device. No role switch, no time limit, no quota, no change number.
#   sequenced (create) least, plus a change number under the device's order without writing the device row: a
#             transaction-level advisory lock on the device (its writers take turns until COMMIT) and a sequence
#   numbered  (create) least, plus the device's change number taken in the statement (one update of the device
#             row, what the schema does; the device row also carries the quotas' counts)
#   (patch: floor, least, numbered and ours likewise, on the device's seeded log)
#   and, to see where least's cost goes, three transactions of least's shape around a statement of no work:
#   `SELECT 1`, `SELECT get_current_device_id()` (what each policy runs once per statement), and the same lookup
#   of the key map as a plain statement
#   ours      the service's transaction as `serve` sends it for a device whose id it keeps (its steady state): the
#             context statement (a write's: nine set_config calls, role included, and the kept id's check; a
#             read's: five, no check), then the repository's statements with the device's stored id bound, on the
#             real tables: a read (get, list) in one round trip with no BEGIN or COMMIT, which checks the kept id
#             itself only when it finds no row; a write of one round trip likewise (issue 59, since 2026-11-30;
#             BEGIN and COMMIT until then); create's insert alone, with no check
#             before it (PoopLogRepository.create: the insert's trigger checks the kept id, and the row is read back
#             only when the insert returned none). Until issue 57 "ours" was
#             the replica of before sql/0030 (four settings fewer, no check, the device found by its key)
#
#   bench/least/run.sh [BINARY]     (BINARY: the poopypals executable, default .build/debug/poopypals)
#   LEAST_SCRIPTS_ONLY=DIR: set the database up, write the scripts and its URL (DIR/url) there, run nothing and
#   leave the database (bench/least/instructions.sh counts the same transactions' instructions)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/.build/debug/poopypals}
cd "$ROOT"
[ -x "$BIN" ] || { echo "least: no $BIN (swift build)" >&2; exit 1; }
command -v pgbench >/dev/null || { echo "least: pgbench missing (postgresql-contrib)" >&2; exit 1; }
URL=$(scripts/db.sh start)
SU=$(scripts/db.sh superuser-url)
DATA=$(psql "$SU" -AtX -c "SHOW data_directory")
WORK=$(mktemp -d)
cleanup() {
  psql "$SU" -qX -c "DROP DATABASE IF EXISTS leastbench" \
    -c "DROP ROLE IF EXISTS poopypals_app_leastbench" -c "DROP ROLE IF EXISTS poopypals_profiles_leastbench" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
OWNER=$(psql "$URL" -AtX -c "SELECT current_user")
cleanup; WORK=$(mktemp -d)
psql "$SU" -qX -c "CREATE DATABASE leastbench OWNER \"$OWNER\"" >/dev/null
CU=$(echo "$URL" | sed -E 's|/[^/?]+(\?\|$)|/leastbench\1|')
DATABASE_URL=$CU "$BIN" migrate >"$WORK/migrate.log" 2>&1 || { tail -5 "$WORK/migrate.log" >&2; exit 1; }
SCU=$(echo "$SU" | sed -E 's|:///[^?]+\?|:///leastbench?|')
psql "$SCU" -qX -v ON_ERROR_STOP=1 -v owner="$OWNER" <<'SQL'
INSERT INTO devices (key, model) SELECT gen_random_uuid(), 'bench' FROM generate_series(1, 1000);
INSERT INTO device_key_map (key, id) SELECT key, id FROM devices;  -- sql/0027: registration writes it, not a trigger
INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type)
SELECT gen_random_uuid(), d.id, date_trunc('second', now()) - g * interval '1 hour', 4 FROM devices d, generate_series(1, 30) g;
CREATE TABLE bench_keys AS
SELECT row_number() OVER (ORDER BY d.key) AS n, d.key, d.id AS device, (SELECT l.id FROM poop_logs l WHERE l.device_id = d.id LIMIT 1) AS log_id
FROM devices d;
CREATE UNIQUE INDEX ON bench_keys (n);
GRANT SELECT ON bench_keys TO :"owner";
CREATE SCHEMA floor AUTHORIZATION :"owner";
CREATE SCHEMA least AUTHORIZATION :"owner";
CREATE TABLE floor.device_key_map (LIKE device_key_map INCLUDING ALL);
INSERT INTO floor.device_key_map SELECT * FROM device_key_map;
CREATE TABLE floor.poop_logs (LIKE poop_logs INCLUDING ALL);
INSERT INTO floor.poop_logs SELECT * FROM poop_logs;
CREATE TABLE least.devices (LIKE devices INCLUDING ALL);
INSERT INTO least.devices SELECT * FROM devices;
CREATE TABLE least.poop_logs (LIKE poop_logs INCLUDING ALL);
INSERT INTO least.poop_logs SELECT * FROM poop_logs;
ALTER TABLE least.poop_logs ADD FOREIGN KEY (device_id) REFERENCES least.devices (id) ON DELETE CASCADE;
ALTER TABLE floor.device_key_map OWNER TO :"owner";
ALTER TABLE floor.poop_logs OWNER TO :"owner";
ALTER TABLE least.devices OWNER TO :"owner";
ALTER TABLE least.poop_logs OWNER TO :"owner";
ALTER TABLE least.poop_logs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY own_read ON least.poop_logs FOR SELECT USING (device_id = (SELECT get_current_device_id()));
CREATE POLICY own_insert ON least.poop_logs FOR INSERT WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE POLICY own_update ON least.poop_logs FOR UPDATE USING (device_id = (SELECT get_current_device_id()))
    WITH CHECK (device_id = (SELECT get_current_device_id()));
CREATE SEQUENCE least.change_seq;
ALTER SEQUENCE least.change_seq OWNER TO :"owner";
VACUUM ANALYZE;
SQL
# The policies bind the owner too (forced): the least transaction must see its own rows and no other device's.
K1=$(psql "$SCU" -AtX -c "SELECT key FROM bench_keys WHERE n = 1")
seen=$(psql "$CU" -qAtX -c "BEGIN" -c "SELECT set_config('app.device_id', '$K1', true)" -c "SELECT count(*), count(DISTINCT device_id) FROM least.poop_logs" -c "COMMIT" | sed -n 2p)
[ "$seen" = "30|1" ] || { echo "least: forced policy not in effect (saw $seen rows|devices, expected 30|1)" >&2; exit 1; }

cols="id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version"
id() { echo "(SELECT m.id FROM $1 m WHERE m.key = :k::uuid)"; }
device="SELECT set_config('app.device_id', :k, true);"
settings="set_config('role', poopypals_service_role(), true), set_config('app.device_id', :k, true), set_config('statement_timeout', '5000', true), set_config('lock_timeout', '2000', true), set_config('idle_in_transaction_session_timeout', '60000', true), set_config('poopypals.max_logs_per_device', '100000', true), set_config('poopypals.max_tombstones_per_device', '20000', true), set_config('poopypals.device_write_burst', '2000', true), set_config('poopypals.device_write_rate', '20', true)"
check="CASE WHEN get_current_device_id() IS DISTINCT FROM :d::uuid THEN poopypals_device_is(:d::uuid) END"
ctx9="SELECT $settings, $check;"
ctx9unchecked="SELECT $settings;"  # create's: its insert checks the kept id (PoopLogRepository.create, issue 57)
# A read's context (DeviceTransaction.ContextSQL.readOnly, issue 57): no quota, write bucket or idle limit, and no
# check of the kept id: get and list check it themselves, only when they find no row (PoopLogRepository
# .keptIDReadStatements: the read as the lateral side of a LEFT JOIN from one row; the row of none calls the check).
ctx9read="SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', :k, true), set_config('statement_timeout', '5000', true), set_config('lock_timeout', '2000', true), set_config('transaction_read_only', 'on', true);"
checkIfNone() { echo "SELECT page.* FROM (VALUES (:d::uuid)) AS one (device) LEFT JOIN LATERAL ($1) AS page ON true WHERE CASE WHEN page.id IS NOT NULL THEN true ELSE ${check} END;"; }
get() { echo "SELECT $cols FROM $1 WHERE device_id = $(id "$2") AND id = :l;"; }
list() { echo "SELECT $cols FROM $1 WHERE device_id = $(id "$2") ORDER BY occurred_at DESC, id DESC LIMIT 21;"; }
insert() { echo "INSERT INTO $1 (id, device_id, occurred_at, bristol_type, notes, change_seq) VALUES (gen_random_uuid(), $(id "$2"), now(), 4, NULL, 0) ON CONFLICT (device_id, id) DO NOTHING RETURNING $cols;"; }
numbered="WITH d AS (UPDATE least.devices SET change_seq = change_seq + 1 WHERE id = $(id device_key_map) RETURNING id, change_seq) INSERT INTO least.poop_logs (id, device_id, occurred_at, bristol_type, notes, change_seq) SELECT gen_random_uuid(), d.id, now(), 4, NULL, d.change_seq FROM d ON CONFLICT (device_id, id) DO NOTHING RETURNING $cols;"
sequenced="INSERT INTO least.poop_logs (id, device_id, occurred_at, bristol_type, notes, change_seq) SELECT gen_random_uuid(), m.id, now(), 4, NULL, nextval('least.change_seq') FROM device_key_map m, LATERAL (SELECT pg_advisory_xact_lock(hashtextextended(m.id::text, 0))) AS turn WHERE m.key = :k::uuid ON CONFLICT (device_id, id) DO NOTHING RETURNING $cols;"
# The service's: the stored id bound ($2). Its row is read back only when the insert returned none (a repeated
# upload, in a transaction of its own), not in every create's round trip as until issue 57.
create="INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (gen_random_uuid(), :d::uuid, now(), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING $cols;"
served() { printf '%s\n' '\startpipeline' "$@" '\endpipeline'; }  # a request of one round trip: no BEGIN, no COMMIT
script() {  # NAME STATEMENT...: the key (and a log of the device) read outside the transaction, then the statements
  local f=$WORK/$1.sql; shift
  printf '%s\n' '\set n random(1, 1000)' 'SELECT key::text AS k, device::text AS d, log_id AS l FROM bench_keys WHERE n = :n \gset' "$@" >"$f"
}
tx() { printf '%s\n' '\startpipeline' 'BEGIN;' "$@" 'COMMIT;' '\endpipeline'; }
script "get_1_floor" "$(get floor.poop_logs floor.device_key_map)"
script "get_2_least" "$(tx "$device" "$(get least.poop_logs device_key_map)")"
script "get_4_ours" "$(served "$ctx9read" "$(checkIfNone "SELECT $cols FROM poop_logs WHERE device_id = :d::uuid AND id = :l")")"
script "list_1_floor" "$(list floor.poop_logs floor.device_key_map)"
script "list_2_least" "$(tx "$device" "$(list least.poop_logs device_key_map)")"
script "list_4_ours" "$(served "$ctx9read" "$(checkIfNone "SELECT $cols FROM poop_logs WHERE device_id = :d::uuid ORDER BY occurred_at DESC, id DESC LIMIT 21")")"
script "parts_1_SELECT 1" "$(tx "$device" "SELECT 1;")"
script "parts_2_get_current_device_id()" "$(tx "$device" "SELECT get_current_device_id();")"
script "parts_3_the key map lookup" "$(tx "$device" "SELECT m.id FROM device_key_map m WHERE m.key = :k::uuid;")"
script "create_1_floor" "$(insert floor.poop_logs floor.device_key_map)"
script "create_2_least" "$(tx "$device" "$(insert least.poop_logs device_key_map)")"
script "create_3_sequenced" "$(tx "$device" "$sequenced")"
script "create_4_numbered" "$(tx "$device" "$numbered")"
script "create_5_ours" "$(served "$ctx9unchecked" "$create")"
# Patch (issue 57): the device's seeded log, a random Bristol type; numbered takes the change number from one update
# of the device row, as numbered create does; ours is PoopLogRepository.update's statement as serve sends it.
patch() { echo "UPDATE $1 SET bristol_type = :b, updated_at = now() WHERE device_id = $(id "$2") AND id = :l RETURNING $cols;"; }
patch_numbered="WITH d AS (UPDATE least.devices SET change_seq = change_seq + 1 WHERE id = $(id device_key_map) RETURNING change_seq) UPDATE least.poop_logs SET bristol_type = :b, updated_at = now(), change_seq = (SELECT change_seq FROM d) WHERE device_id = $(id device_key_map) AND id = :l RETURNING $cols;"
patch_ours="UPDATE poop_logs SET occurred_at = COALESCE(NULL::timestamptz, occurred_at), bristol_type = COALESCE(:b::smallint, bristol_type), notes = CASE WHEN false THEN NULL::text ELSE notes END, updated_at = now() WHERE device_id = :d::uuid AND id = :l::uuid RETURNING $cols;"
script "patch_1_floor" '\set b random(1, 7)' "$(patch floor.poop_logs floor.device_key_map)"
script "patch_2_least" '\set b random(1, 7)' "$(tx "$device" "$(patch least.poop_logs device_key_map)")"
script "patch_4_numbered" '\set b random(1, 7)' "$(tx "$device" "$patch_numbered")"
script "patch_5_ours" '\set b random(1, 7)' "$(served "$ctx9" "$patch_ours")"

# bench/least/instructions.sh: the database and the scripts only, left for it (the database stays).
if [ -n "${LEAST_SCRIPTS_ONLY:-}" ]; then
  cp "$WORK"/*.sql "$LEAST_SCRIPTS_ONLY"/
  printf '%s\n' "$CU" >"$LEAST_SCRIPTS_ONLY/url"
  trap - EXIT
  rm -rf "$WORK"
  exit 0
fi

cpu() { python3 "$ROOT/bench/pg_cpu.py" "$DATA"; }  # PostgreSQL CPU seconds so far (bench/pg_cpu.py)
backends_gone() {  # pgbench's backends exit after it does; a read before they are reaped would miss their CPU
  for _ in $(seq 50); do
    [ "$(psql "$SCU" -AtX -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'leastbench' AND pid <> pg_backend_pid()")" = 0 ] && return
    sleep 0.1
  done
}
run() {  # NAME
  local before after out n tps
  backends_gone; before=$(cpu)
  out=$(pgbench -n -M prepared -c 8 -j 2 -T 6 -f "$WORK/$1.sql" "$CU" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
  backends_gone; after=$(cpu)
  n=$(echo "$out" | sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p')
  tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p')
  [ "${n:-0}" -gt 0 ] || { echo "$out" | tail -5 >&2; exit 1; }
  printf '| %s | %s | %.0f | %.0f |\n' "${1%%_*}" "${1#*_?_}" "$tps" "$(python3 -c "print(($after - $before) / $n * 1e6)")"
}
echo "| transaction | shape | tps | PostgreSQL CPU µs per transaction |"
echo "|---|---|---|---|"
for round in 1 2 3; do
  for f in "$WORK"/*.sql; do run "$(basename "$f" .sql)"; done
done
