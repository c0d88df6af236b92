#!/usr/bin/env bash
# The project's own PostgreSQL, used by `make run`, `make test` and `make bench`.
#
#   scripts/db.sh start    ensure a server is running; print its URL on stdout (progress goes to stderr)
#   scripts/db.sh url      print the URL of the running server
#   scripts/db.sh status   say what is running
#   scripts/db.sh stop     stop the throw-away server (data is kept)
#   scripts/db.sh reset    stop it and delete its data
#   scripts/db.sh pgbouncer  ensure PgBouncer (transaction pooling) runs in front of it; print its URL
#
# Order of preference: DATABASE_URL if set; else local PostgreSQL server binaries (a throw-away cluster in
# .pg/, on 127.0.0.1 only, as the `postgres` user when run as root); else Docker (`docker compose`); else an
# error saying what to install. Starting twice is harmless.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${POOPYPALS_PG_DIR:-$ROOT/.pg}
PORT=${POOPYPALS_PG_PORT:-55432}
DOCKER_URL="postgresql://poopypals:poopypals@127.0.0.1:${POOPYPALS_DOCKER_PG_PORT:-55433}/poopypals"

say() { echo "db: $*" >&2; }
die() { echo "db: error: $*" >&2; exit 1; }

find_bindir() {
  local candidate
  for candidate in "${POOPYPALS_PG_BINDIR:-}" \
                   "$(dirname "$(readlink -f "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")")" \
                   "$(pg_config --bindir 2>/dev/null || true)" \
                   $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) \
                   /usr/local/opt/postgresql*/bin /opt/homebrew/opt/postgresql*/bin; do
    if [ -n "$candidate" ] && [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ] && [ -x "$candidate/postgres" ]; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

docker_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

# Run a server command as the cluster owner: `postgres` when we are root (PostgreSQL refuses root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

local_running() { [ -f "$STATE/data/postmaster.pid" ] && as_owner "$BINDIR/pg_ctl" -D "$STATE/data" status >/dev/null 2>&1; }

init_cluster() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user (apt-get install postgresql creates it)"
    # The postgres user must reach the data dir; a project under /root is not reachable: use /tmp instead.
    if ! runuser -u postgres -- test -x "$(dirname "$STATE")"; then
      STATE=/tmp/poopypals-pg-$(echo "$ROOT" | cksum | cut -d' ' -f1)
      say "project folder not reachable by the postgres user; using $STATE"
    fi
  fi
  mkdir -p "$STATE"
  local socket_dir="$STATE/run"
  # Unix socket paths are limited to ~107 bytes.
  if [ ${#socket_dir} -gt 80 ]; then socket_dir=$(mktemp -d /tmp/poopypals-sock.XXXXXX); fi
  mkdir -p "$socket_dir"
  while port_in_use "$PORT"; do PORT=$((PORT + 1)); done
  local password; password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  [ "$(id -u)" = 0 ] && chown -R postgres: "$STATE" "$socket_dir"
  chmod 700 "$STATE" "$socket_dir"
  say "initialising a throw-away cluster in $STATE/data (port $PORT)"
  as_owner "$BINDIR/initdb" -D "$STATE/data" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >"$STATE/initdb.log" 2>&1 \
    || { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
  # Throw-away, local-only, fast: durability is traded for speed on purpose (never use these settings in production).
  as_owner tee -a "$STATE/data/postgresql.conf" >/dev/null <<CONF

# --- poopypals throw-away cluster ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$socket_dir'
unix_socket_permissions = 0700
max_connections = 400
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
max_prepared_transactions = 0
log_min_messages = warning
CONF
  echo "$PORT" >"$STATE/port"; echo "$socket_dir" >"$STATE/socket_dir"
  start_local
  # The app's login role: owns its databases, may create test databases and the NOLOGIN service role;
  # deliberately not a superuser, so row-level security is really exercised.
  local psql="$BINDIR/psql"; [ -x "$psql" ] || psql=$(command -v psql) || die "psql not found"
  as_owner "$psql" -q -X -v ON_ERROR_STOP=1 -h "$socket_dir" -p "$PORT" -U postgres -d postgres \
    -v pw="$password" >/dev/null <<'SQL'
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
SQL
  umask 077
  echo "postgresql://poopypals:${password}@127.0.0.1:${PORT}/poopypals" >"$STATE/url"
}

start_local() {
  local socket_dir; socket_dir=$(cat "$STATE/socket_dir")
  mkdir -p "$socket_dir"; [ "$(id -u)" = 0 ] && chown postgres: "$socket_dir"
  as_owner "$BINDIR/pg_ctl" -D "$STATE/data" -l "$STATE/data/server.log" -w -t 60 start >/dev/null \
    || { tail -20 "$STATE/data/server.log" >&2 || true; die "the server did not start"; }
  say "PostgreSQL running on 127.0.0.1:$(cat "$STATE/port")"
}

locate_state() {
  if [ ! -f "$STATE/url" ] && [ "$(id -u)" = 0 ]; then
    local fallback=/tmp/poopypals-pg-$(echo "$ROOT" | cksum | cut -d' ' -f1)
    [ -f "$fallback/url" ] && STATE=$fallback
  fi
  return 0
}

# PgBouncer in transaction-pooling mode in front of the throw-away server, for the isolation tests.
start_pgbouncer() {
  local url; url=$(cat "$STATE/url")
  local dir="$STATE/pgbouncer"
  if [ -f "$dir/url" ] && [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; then
    cat "$dir/url"; return 0
  fi
  local bin; bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null) || true
  if [ -z "$bin" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing pgbouncer"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; }
      bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    else
      die "pgbouncer not found (Debian/Ubuntu: apt-get install pgbouncer)"
    fi
  fi
  # postgresql://poopypals:PASSWORD@127.0.0.1:PORT/poopypals, as written by init_cluster.
  local password=${url#*://poopypals:}; password=${password%%@*}
  local server_port; server_port=$(cat "$STATE/port")
  local port=$((server_port + 100))
  while port_in_use "$port"; do port=$((port + 1)); done
  as_owner mkdir -p "$dir"
  as_owner tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$server_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  echo "\"poopypals\" \"$password\"" | as_owner tee "$dir/userlist.txt" >/dev/null
  as_owner chmod 600 "$dir/userlist.txt"
  as_owner "$bin" -d "$dir/pgbouncer.ini" >/dev/null 2>&1 || { as_owner tail -5 "$dir/pgbouncer.log" >&2; die "pgbouncer did not start"; }
  for _ in $(seq 50); do port_in_use "$port" && break; sleep 0.1; done
  port_in_use "$port" || die "pgbouncer is not listening on $port"
  echo "postgresql://poopypals:${password}@127.0.0.1:${port}/poopypals" | as_owner tee "$dir/url"
  say "PgBouncer (transaction pooling) on 127.0.0.1:$port"
}

stop_pgbouncer() {
  local pidfile="$STATE/pgbouncer/pgbouncer.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"; say "pgbouncer stopped"
  fi
  return 0
}

cmd=${1:-start}
if [ -n "${DATABASE_URL:-}" ] && [ "$cmd" != stop ] && [ "$cmd" != reset ]; then
  [ "$cmd" = status ] && say "using DATABASE_URL (not managed here)"
  [ "$cmd" = pgbouncer ] && { [ -n "${PGBOUNCER_URL:-}" ] || die "DATABASE_URL is set: set PGBOUNCER_URL to a transaction-mode PgBouncer in front of it"; echo "$PGBOUNCER_URL"; }
  { [ "$cmd" = start ] || [ "$cmd" = url ]; } && echo "$DATABASE_URL"
  exit 0
fi
locate_state

case "$cmd" in
  start)
    if BINDIR=$(find_bindir); then
      if [ ! -f "$STATE/url" ]; then
        rm -rf "$STATE/data"; init_cluster
      elif ! local_running; then
        start_local
      fi
      cat "$STATE/url"
    elif docker_answers; then
      say "no local PostgreSQL binaries; starting the docker compose service"
      docker compose -f "$ROOT/docker-compose.yml" up -d --wait db >&2
      echo "$DOCKER_URL"
    else
      die "no PostgreSQL found. Install the server (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@15), start Docker, or set DATABASE_URL."
    fi ;;
  url)
    [ -f "$STATE/url" ] || die "no local cluster; run scripts/db.sh start"
    cat "$STATE/url" ;;
  pgbouncer)
    [ -f "$STATE/url" ] || die "no local cluster; run scripts/db.sh start"
    start_pgbouncer ;;
  status)
    if BINDIR=$(find_bindir) && [ -f "$STATE/url" ] && local_running; then
      say "running on 127.0.0.1:$(cat "$STATE/port") (data in $STATE/data)"
    else
      say "not running"; exit 1
    fi ;;
  stop|reset)
    stop_pgbouncer
    if BINDIR=$(find_bindir) && [ -f "$STATE/data/PG_VERSION" ]; then
      if local_running; then as_owner "$BINDIR/pg_ctl" -D "$STATE/data" -m fast -w stop >/dev/null; say "stopped"; fi
    elif docker_answers; then
      docker compose -f "$ROOT/docker-compose.yml" stop >&2 || true
    fi
    if [ "$cmd" = reset ]; then
      [ -f "$STATE/socket_dir" ] && case "$(cat "$STATE/socket_dir")" in /tmp/poopypals-sock.*) rm -rf "$(cat "$STATE/socket_dir")";; esac
      rm -rf "$STATE"; say "data removed"
    fi ;;
  *) die "usage: scripts/db.sh start|url|status|stop|reset" ;;
esac
