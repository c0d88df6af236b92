#!/usr/bin/env bash
# The request context as the service sends it (set_config, prepared, in the request's pipeline) against the SET LOCAL
# statements Citus carries to its workers (docs/scaling.md, "Sharding by device", step 4): PostgreSQL CPU per
# transaction from /proc (the postmaster and its children), pgbench 8 clients, 6 s a run, 3 rounds, on a scratch
# database `ctxbench` of the local PostgreSQL 15 (scripts/db.sh), migrated, 1 000 devices with 10 logs each.
# Each transaction: the context, one count of the device's logs through get_current_device_id(), COMMIT; before it,
# outside the transaction, the device's key is read into a pgbench variable (the same in every script).
#
#   bench/context/run.sh [BINARY] [names]     (BINARY: the poopypals executable, default .build/debug/poopypals)
#
# With `names` (sql/0030, the request naming its device): A's context and count, the count naming the device by a
# sub-select of its key (J: the statements before 0030), by its stored id (I: a kept id, unchecked), and by its
# stored id after `poopypals_device_is` checks it (H: what the service sends with a kept id).
#
# pgbench cannot vary a literal under -M prepared, so the SET LOCAL scripts run in the simple protocol, and so does
# a set_config script beside them for the comparison: A vs C is the protocol's price, B vs C and E vs F the
# statement's. G is A's transaction with its eight constants sent as prepared SET LOCAL statements (what Citus
# carries) and only the device by set_config: the price of the constants as SET LOCAL, prepared.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/bench/context
BIN=${1:-$ROOT/.build/debug/poopypals}
SET=${2:-context}
cd "$ROOT"
[ -x "$BIN" ] || { echo "context: no $BIN (swift build)" >&2; exit 1; }
command -v pgbench >/dev/null || { echo "context: pgbench missing (postgresql-contrib)" >&2; exit 1; }
URL=$(scripts/db.sh start)
SU=$(scripts/db.sh superuser-url)
DATA=$(psql "$SU" -AtX -c "SHOW data_directory")
WORK=$(mktemp -d)
trap 'psql "$SU" -qX -c "DROP DATABASE IF EXISTS ctxbench" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
OWNER=$(psql "$URL" -AtX -c "SELECT current_user")
psql "$SU" -qX -c "DROP DATABASE IF EXISTS ctxbench" -c "CREATE DATABASE ctxbench OWNER \"$OWNER\"" >/dev/null
CU=$(echo "$URL" | sed -E 's|/[^/?]+(\?\|$)|/ctxbench\1|')
DATABASE_URL=$CU "$BIN" migrate >"$WORK/migrate.log" 2>&1 || { tail -5 "$WORK/migrate.log" >&2; exit 1; }
SCU=$(echo "$SU" | sed -E 's|:///[^?]+\?|:///ctxbench?|')
psql "$SCU" -qX -v ON_ERROR_STOP=1 -v owner="$OWNER" <<'SQL'
INSERT INTO devices (key, model) SELECT gen_random_uuid(), 'bench' FROM generate_series(1, 1000);
INSERT INTO device_key_map (key, id) SELECT key, id FROM devices;  -- sql/0027: registration writes it, not a trigger
CREATE TABLE ctx_keys AS SELECT row_number() OVER (ORDER BY key) AS n, key, id FROM devices;
CREATE UNIQUE INDEX ON ctx_keys (n);
GRANT SELECT ON ctx_keys TO :"owner";
INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type)
SELECT gen_random_uuid(), d.id, date_trunc('second', now()) - g * interval '1 hour', 4 FROM devices d, generate_series(1, 10) g;
VACUUM ANALYZE;
SQL
ROLE=$(psql "$CU" -AtX -c "SELECT poopypals_service_role()")
[[ "$ROLE" =~ ^[a-z0-9_]+$ ]] || { echo "context: unexpected role name $ROLE" >&2; exit 1; }
for f in "$HERE"/*.sql.in; do sed "s/@ROLE@/$ROLE/" "$f" >"$WORK/$(basename "$f" .in)"; done
cp "$HERE"/*.sql "$WORK/"
cpu() { python3 "$ROOT/bench/pg_cpu.py" "$DATA"; }  # PostgreSQL CPU seconds so far (bench/pg_cpu.py)
run() {  # LABEL MODE FILE
  local before after out n tps
  before=$(cpu)
  out=$(pgbench -n -M "$2" -c 8 -j 2 -T 6 -f "$WORK/$3" "$CU" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
  after=$(cpu)
  n=$(echo "$out" | sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p')
  tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p')
  [ "${n:-0}" -gt 0 ] || { echo "$out" | tail -5 >&2; exit 1; }
  printf '| %s | %s | %.0f | %.0f |\n' "$1" "$2" "$tps" "$(python3 -c "print(($after - $before) / $n * 1e6)")"
}
echo "| context | protocol | tps | PostgreSQL CPU µs per transaction |"
echo "|---|---|---|---|"
if [ "$SET" = names ]; then
  for round in 1 2 3; do
    run "J: the device by a sub-select of its key (before 0030)" prepared j_prepared_subselect.sql
    run "I: the device's stored id, unchecked" prepared i_prepared_named.sql
    run "H: the stored id, checked (poopypals_device_is)" prepared h_prepared_checked.sql
  done
  exit 0
fi
for round in 1 2 3; do
  run "A: set_config ×9 (the service's)" prepared a_prepared.sql
  run "C: set_config ×9" simple c_simple_setconfig.sql
  run "B: SET LOCAL ×9, literals" simple b_simple_setlocal.sql
  run "F: set_config ×2 (role, device)" simple f_simple_setconfig_two.sql
  run "E: SET LOCAL ×2 (role, device), literals" simple e_simple_two.sql
  run "G: SET LOCAL ×8 constants + set_config(device)" prepared g_prepared_setlocal.sql
done
