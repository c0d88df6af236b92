# Sourced by scripts/db.sh: a throw-away cluster: create, start, where its state lives. Uses its globals (ROOT, STATE, PORT, BINDIR) and scripts/lib/common.sh.

local_running() { [ -f "$STATE/data/postmaster.pid" ] && as_owner "$BINDIR/pg_ctl" -D "$STATE/data" status >/dev/null 2>&1; }

# Tests simulate a hung server by stopping a backend (SIGSTOP) and resume it when they end. A run killed in
# between (Ctrl-C, a pipe closed under it) leaves that backend stopped, and then every later DROP DATABASE on the
# cluster waits for it for ever (wait event ProcSignalBarrier): the next make test hangs. Resumed here, when the
# cluster is started for a new run.
resume_stopped_backends() {
  local postmaster pid state
  postmaster=$(head -1 "$STATE/data/postmaster.pid" 2>/dev/null) || return 0
  [ -n "$postmaster" ] || return 0
  for pid in $(ps -o pid= --ppid "$postmaster" 2>/dev/null); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || continue
    if [ "$state" = T ]; then
      kill -CONT "$pid" 2>/dev/null && say "resumed a stopped server process ($pid) left by an interrupted test run"
    fi
  done
  return 0
}

init_cluster() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user (apt-get install postgresql creates it)"
    # The postgres user must reach the data dir; a project under /root is not reachable: use $PRIVATE_PARENT instead.
    if ! runuser -u postgres -- test -x "$(dirname "$STATE")"; then
      STATE=$(fallback_state)
      private_parent
      say "project folder not reachable by the postgres user; using $STATE"
    fi
  fi
  mkdir -p "$STATE"
  local socket_dir="$STATE/run"
  # Unix socket paths are limited to ~107 bytes.
  if [ ${#socket_dir} -gt 80 ]; then socket_dir=$(mktemp -d /tmp/poopypals-sock.XXXXXX); fi
  mkdir -p "$socket_dir"
  PORT=$(first_free_port "$PORT")
  local password; password=$(random_hex 24)
  [ "$(id -u)" = 0 ] && chown -R postgres: "$STATE" "$socket_dir"
  chmod 700 "$STATE" "$socket_dir"
  say "initialising a throw-away cluster in $STATE/data (port $PORT)"
  as_owner "$BINDIR/initdb" -D "$STATE/data" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >"$STATE/initdb.log" 2>&1 \
    || { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
  # Throw-away, local-only, fast: durability is traded for speed on purpose (never use these settings in production).
  # max_connections: the suite runs 60 test suites at once, each with databases and pools of its own; sampled every
  # 0.25 s it peaked at 463 client connections here, and a fresh clone's first run (CI of 2026-11-28) went past 600
  # ("too many clients") on PostgreSQL 18. Each slot costs a little shared memory, nothing until used.
  as_owner tee -a "$STATE/data/postgresql.conf" >/dev/null <<CONF

# --- poopypals throw-away cluster ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$socket_dir'
unix_socket_permissions = 0700
max_connections = 1000
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
max_prepared_transactions = 0
log_min_messages = warning
CONF
  echo "$PORT" >"$STATE/port"; echo "$socket_dir" >"$STATE/socket_dir"; echo "$BINDIR" >"$STATE/bindir"
  start_local
  # The app's login role: owns its databases, may create test databases and the NOLOGIN service role;
  # deliberately not a superuser, so row-level security is really exercised.
  local psql="$BINDIR/psql"; [ -x "$psql" ] || psql=$(command -v psql) || die "psql not found"
  # The password goes through the environment, never a command line (ps shows those to every user).
  POOPYPALS_DB_PASSWORD=$password as_owner "$psql" -q -X -v ON_ERROR_STOP=1 -h "$socket_dir" -p "$PORT" -U postgres -d postgres \
    >/dev/null <<'SQL'
\getenv pw POOPYPALS_DB_PASSWORD
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
SQL
  umask 077
  echo "postgresql://poopypals:${password}@127.0.0.1:${PORT}/poopypals" >"$STATE/url"
}

start_local() {
  local socket_dir; socket_dir=$(cat "$STATE/socket_dir")
  mkdir -p "$socket_dir"; [ "$(id -u)" = 0 ] && chown postgres: "$socket_dir"
  # A restart: the port recorded when the cluster was made may be held now (55432 and 55418 lie in the kernel's
  # ephemeral range, where a client connection's local end can hold a port nothing listens on; PostgreSQL 18's
  # restart failed so once). Then the server moves to the next free port, and its URL with it (PgBouncer's
  # configuration is written from $STATE/port at each start).
  # The check and the server's bind() are apart, and a connection can take the port between them (make test
  # after a failover run here: "could not bind IPv4 address "127.0.0.1": Address already in use" on 55432, which
  # the check had found free): then the next free port, up to five times.
  local port free attempt log=$STATE/data/server.log seen
  for attempt in 1 2 3 4 5; do
    port=$(cat "$STATE/port"); free=$(first_free_port "$port")
    if [ "$free" != "$port" ]; then
      say "port $port is taken now; this server moves to $free"
      move_port "$port" "$free"
    fi
    seen=$(as_owner stat -c %s "$log" 2>/dev/null || echo 0)
    as_owner "$BINDIR/pg_ctl" -D "$STATE/data" -l "$log" -w -t 60 start >/dev/null && break
    if [ "$attempt" -lt 5 ] && as_owner tail -c "+$((seen + 1))" "$log" 2>/dev/null | grep -q "could not bind IPv4 address"; then
      say "127.0.0.1:$free was taken as the server started; trying the next port"
      move_port "$free" "$(first_free_port $((free + 1)))"
      continue
    fi
    tail -20 "$log" >&2 || true; die "the server did not start"
  done
  say "PostgreSQL running on 127.0.0.1:$(cat "$STATE/port")"
}

move_port() {  # FROM TO: the server's port, its record and its URL
  echo "port = $2" | as_owner tee -a "$STATE/data/postgresql.conf" >/dev/null
  echo "$2" >"$STATE/port"
  sed -i "s|@127.0.0.1:$1/|@127.0.0.1:$2/|" "$STATE/url"
}

# Where a cluster goes when the postgres user cannot reach its folder: one per project and per cluster folder.
fallback_state() {
  local key; key=$(echo "$ROOT" | cksum | cut -d' ' -f1)
  [ "$STATE" = "$ROOT/.pg" ] || key=$key-$(echo "$STATE" | cksum | cut -d' ' -f1)
  echo "$PRIVATE_PARENT/pg-$key"
}

locate_state() {
  if [ ! -f "$STATE/url" ] && [ "$(id -u)" = 0 ]; then
    local fallback; fallback=$(fallback_state)
    [ -f "$fallback/url" ] && STATE=$fallback
  fi
  return 0
}
