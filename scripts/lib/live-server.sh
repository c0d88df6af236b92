# Sourced by the steps of `make test` that call a live server (fuzz.sh, client.sh): `start_live_server URL BIN`
# creates a database of its own on the server at URL, migrates it with BIN, starts `BIN serve` on a free port
# with a fresh token secret (the same database as its read pool), and sets `api` (the base URL), `metrics` (its /metrics URL) and `token` (a valid bearer
# token). An EXIT trap stops
# the server and drops the database and its roles. Callers set `say`.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

start_live_server() {
  local url=$1 bin=$2
  command -v psql >/dev/null || { say "NOT RUN: psql is needed to create a database for the live server"; exit 0; }
  case "$url" in *\?*) say "NOT RUN: DATABASE_URL with query parameters is not supported here"; exit 0 ;; esac
  live_admin_url=$url
  live_db=poopypals_live_$$
  PGOPTIONS="-c client_min_messages=warning" psql "$url" -X -q -c "DROP DATABASE IF EXISTS $live_db" -c "CREATE DATABASE $live_db" >/dev/null
  live_server=
  trap stop_live_server EXIT
  local db_url=${url%/*}/$live_db
  "$bin" migrate --database-url "$db_url" >/dev/null 2>&1

  export AUTH_JWT_SECRET
  AUTH_JWT_SECRET=$(random_hex 32)
  local out port=
  out=$(mktemp)
  # The database is also the read pool (a primary is always fresh): writes answer a Consistency-Token and reads
  # take one, as on a deployment with standbys.
  # The fuzzer and the generated client register many devices from one address: more than the registration
  # limit's bucket (sql/0015), which RateLimitTests test. Likewise its device's write bucket: with writes cheaper
  # since sql/0024 the fuzzer's 500-operation pushes spent the default 2 000 tokens early, and most of its later
  # schema-valid pushes were 429 (schemathesis: "validation mismatch" on POST /v1/sync, which fails the run).
  POOPYPALS_REGISTRATION_BURST=100000 POOPYPALS_DEVICE_WRITE_BURST=1000000 POOPYPALS_DEVICE_WRITES_PER_SECOND=100000 \
    POOPYPALS_READ_DATABASE_URL=$db_url "$bin" serve --port 0 --metrics-port 0 --database-url "$db_url" >"$out" 2>/dev/null &
  live_server=$!
  for _ in $(seq 1 200); do
    port=$(sed -n 's#^listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$out")
    metrics_port=$(sed -n 's#^metrics on http://127.0.0.1:\([0-9]*\)/metrics$#\1#p' "$out")
    [ -n "$port" ] && [ -n "$metrics_port" ] && break
    sleep 0.1
  done
  rm -f "$out"
  [ -n "$port" ] || { say "the server did not start"; exit 1; }
  api=http://127.0.0.1:$port
  metrics=http://127.0.0.1:${metrics_port:-0}/metrics
  token=$("$bin" dev-token --email "live-$$@example.com")
}

stop_live_server() {
  [ -n "${live_server:-}" ] && kill "$live_server" 2>/dev/null && wait "$live_server" 2>/dev/null || true
  local roles; roles=$(database_roles psql "${live_admin_url%/*}/$live_db")
  psql "$live_admin_url" -X -q -c "DROP DATABASE IF EXISTS $live_db WITH (FORCE)" >/dev/null 2>&1 || true
  [ -z "$roles" ] || psql "$live_admin_url" -X -q -c "DROP ROLE IF EXISTS $roles" >/dev/null 2>&1 || true
}
