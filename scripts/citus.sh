#!/usr/bin/env bash
# A throw-away Citus cluster for tests and benchmarks: a coordinator and two workers (PostgreSQL 15 + Citus), on
# 127.0.0.1 only, run as the `postgres` user when we are root, state in .citus/ (under /var/lib/poopypals when
# the `postgres` user cannot enter the checkout), like scripts/db.sh. The nodes reach each other over a private
# socket folder (trust, the postgres user's alone), so the service's roles need no password between them.
#
#   scripts/citus.sh install  make sure Citus is installed for the system PostgreSQL (15–17): an installed Citus
#                             (Citus's own packages) is used as it is; else it is built once per machine from
#                             ../shared/vendor/citus-13.2.2.tar.gz (or POOPYPALS_CITUS_TARBALL), with the patches
#                             in scripts/citus/, cached in /var/cache/poopypals (rebuilt when the tarball changes).
#                             Exits 3 saying why ("NOT RUN: …") when it cannot here: not root, no source, no
#                             PostgreSQL 15–17; fails (exit 1) when it should and does not: a source whose sha256 is
#                             not the one expected, our patch not applying, a failed build.
#   scripts/citus.sh start    install, then ensure the cluster runs; print the coordinator's URL (the app's
#                             non-superuser owner, as scripts/db.sh's) on stdout
#   scripts/citus.sh url      the coordinator's URL
#   scripts/citus.sh superuser-url  the coordinator's superuser over its private socket (for tests)
#   scripts/citus.sh socket-dir     the folder of the nodes' sockets (the postgres user's alone)
#   scripts/citus.sh createdb NAME  a database NAME on every node, owned by the app's owner, with Citus in it and
#                             the workers registered (a Citus database of its own, e.g. one per test); prints its URL
#   scripts/citus.sh dropdb NAME    drop it, and the service roles its migrations made, from every node
#   scripts/citus.sh status   what runs, and the workers the coordinator knows
#   scripts/citus.sh stop     stop the three servers (data kept)
#   scripts/citus.sh reset    stop them and delete their data
#
# Installing postgresql-server-dev-15 (needed to build) upgrades Debian's PostgreSQL 15 to the current minor: a
# PostgreSQL 15 server that runs then must be restarted. `make test` installs before it starts any server.
set -euo pipefail

say() { echo "citus: $*" >&2; }
die() { echo "citus: error: $*" >&2; exit 1; }
not_run() { echo "citus: NOT RUN: $*" >&2; exit 3; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/scripts/lib/common.sh"
CALLER=$PWD
cd /  # every path here is absolute; the postgres user may not be able to enter the caller's folder
# The source: beside the checkout (../shared/vendor), or beside the checkout this one was cloned from.
find_tarball() {
  local origin candidate
  origin=$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)
  for candidate in "$ROOT/../shared/vendor/citus-13.2.2.tar.gz" ${origin:+"$origin/../shared/vendor/citus-13.2.2.tar.gz"}; do
    [ -f "$candidate" ] && { echo "$candidate"; return 0; }
  done
  echo "$ROOT/../shared/vendor/citus-13.2.2.tar.gz"
}
# Relative overrides are taken from the caller's folder (this script works from /).
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
TARBALL=$(absolute "${POOPYPALS_CITUS_TARBALL:-$(find_tarball)}")
# The source is built as root's dependency: only the release the vendor folder documents, unless told otherwise.
TARBALL_SHA256=${POOPYPALS_CITUS_SHA256:-c8fc76dc8294636a52b1a0dd75a20d8b4a36937df6443e30ca84d8d0464a6bb9}
CACHE=$(absolute "${POOPYPALS_CITUS_CACHE:-/var/cache/poopypals}")
STATE=$(absolute "${POOPYPALS_CITUS_DIR:-$ROOT/.citus}")
# Below the kernel's ephemeral range (32768-60999), where a client connection's local end can hold a port nothing
# listens on, and above scripts/cluster.sh's 29300-29399.
BASE_PORT=${POOPYPALS_CITUS_PORT:-29460}
NODES=(coordinator worker1 worker2)

# The system PostgreSQL's pg_config that Citus 13.2 supports (15–17), newest first.
find_pg_config() {
  local candidate major
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) "$(dirname "$(command -v pg_config 2>/dev/null || echo /x/x)")"; do
    [ -x "$candidate/pg_config" ] || continue
    major=$("$candidate/pg_config" --version | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p')
    case "$major" in 15|16|17) echo "$candidate/pg_config"; return 0 ;; esac
  done
  return 1
}

# pg_config --version's major (15), or nothing.
pg_major() { "$1" --version | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p'; }

citus_installed() { [ -f "$("$1" --pkglibdir)/citus.so" ] && [ -f "$("$1" --sharedir)/extension/citus.control" ]; }

install_citus() {
  local pg_config
  # Debian's server binaries come without pg_config until postgresql-server-dev (or libpq-dev's /usr/bin one).
  pg_config=$(find_pg_config) || true
  if [ -z "$pg_config" ] && ls /usr/lib/postgresql/1[5-7]/lib/citus.so >/dev/null 2>&1; then
    return 0  # Citus's own packages, without pg_config
  fi
  if [ -n "$pg_config" ] && citus_installed "$pg_config"; then
    local stamp; stamp=$(cat "$CACHE/citus-installed" 2>/dev/null || true)
    # Installed by someone else (Citus's packages): theirs is used. Installed by us: current unless the tarball changed.
    if [ -z "$stamp" ]; then return 0; fi
    if [ -f "$TARBALL" ] && [ "$stamp" = "$(tarball_key "$pg_config")" ]; then return 0; fi
    if [ ! -f "$TARBALL" ]; then return 0; fi
    # A source other than the release expected is never built; the Citus built here from that release still serves.
    local sum; sum=$(sha256sum "$TARBALL" | cut -c1-64)
    if [ "$sum" != "$TARBALL_SHA256" ]; then
      say "warning: $TARBALL has sha256 $sum, not the $TARBALL_SHA256 expected: not built; the Citus built here from the expected release stays"
      return 0
    fi
    say "the Citus source or our patches changed since it was built here: rebuilding"
  fi
  [ -f "$TARBALL" ] || not_run "no Citus installed and no source at $TARBALL (install Citus from its packages: https://docs.citusdata.com)"
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || not_run "no Citus installed; building it needs root on Debian/Ubuntu (or install Citus from its packages)"
  local major
  if [ -z "$pg_config" ]; then
    major=$({ ls -d /usr/lib/postgresql/*/bin 2>/dev/null || true; } | sed -nE 's|.*/postgresql/([0-9]+)/bin|\1|p' | sort -n | awk '$1>=15 && $1<=17' | tail -1)
    [ -n "$major" ] || not_run "no PostgreSQL 15, 16 or 17 server installed (Citus 13.2 supports those)"
  else
    major=$(pg_major "$pg_config")
  fi
  local packages=(postgresql-server-dev-"$major" build-essential liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev
                  libxslt1-dev libpam0g-dev libssl-dev libicu-dev libreadline-dev)
  local missing=() p
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (PostgreSQL $major moves to its current minor: restart any server of it that runs)"
    apt_install "${missing[@]}"
  fi
  pg_config=/usr/lib/postgresql/$major/bin/pg_config
  [ -x "$pg_config" ] || die "$pg_config missing after installing postgresql-server-dev-$major"
  local sum; sum=$(sha256sum "$TARBALL" | cut -c1-64)
  [ "$sum" = "$TARBALL_SHA256" ] || die "$TARBALL has sha256 $sum, not the $TARBALL_SHA256 expected (POOPYPALS_CITUS_SHA256 names another)"
  install -d -m 755 -o root -g root "$CACHE"
  # One build at a time on this machine (two checkouts' make test may start together).
  exec 9>"$CACHE/citus-build.lock"
  flock 9
  local key; key=$(tarball_key "$pg_config")
  if citus_installed "$pg_config" && [ "$(cat "$CACHE/citus-installed" 2>/dev/null || true)" = "$key" ]; then
    flock -u 9; return 0  # built while we waited
  fi
  local build="$CACHE/citus-build-$key"
  rm -rf "$build"; mkdir -m 755 "$build"
  say "building Citus from $(basename "$TARBALL") for PostgreSQL $major in $build (a few minutes; once per machine)"
  tar -xzf "$TARBALL" -C "$build" --strip-components=1 --no-same-owner
  local patch
  for patch in "$ROOT"/scripts/citus/*.patch; do
    [ -e "$patch" ] || continue
    patch -d "$build" -p1 --forward --silent <"$patch" >>"$build/build.log" 2>&1 \
      || { tail -5 "$build/build.log" >&2; die "our patch $(basename "$patch") does not apply to $(basename "$TARBALL")"; }
  done
  # Configured and compiled as an unprivileged user; only the install runs as root.
  chown -R nobody: "$build"
  runuser -u nobody -- sh -c 'cd "$1" && PG_CONFIG="$2" ./configure --without-libcurl && make -j"$3"' sh "$build" "$pg_config" "$(nproc)" \
    >>"$build/build.log" 2>&1 || { tail -20 "$build/build.log" >&2; die "building Citus failed (log: $build/build.log)"; }
  make -C "$build" install >>"$build/build.log" 2>&1 || { tail -20 "$build/build.log" >&2; die "installing Citus failed (log: $build/build.log)"; }
  echo "$key" >"$CACHE/citus-installed"
  flock -u 9
  say "Citus installed into $("$pg_config" --pkglibdir)"
}

# What a build depends on: the source's checksum, the patches and the major version it is built for (an
# extension built for 15.x serves every 15.y).
tarball_key() {
  { sha256sum "$TARBALL" | cut -c1-64; cat "$ROOT"/scripts/citus/*.patch 2>/dev/null; pg_major "$1"; } | sha256sum | cut -c1-16
}

# The cluster's state: when the postgres user cannot enter the checkout, under $PRIVATE_PARENT (common.sh:
# /var/lib/poopypals, root's, so no other user can prepare a folder there for us to trust), one folder per checkout.
locate_state() {
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$(dirname "$STATE")"; then
    STATE=$PRIVATE_PARENT/citus-$(echo "$STATE" | cksum | cut -d' ' -f1)
  fi
}

# The folder of the nodes' sockets: in the state folder, or beside it when that path is too long for a socket.
socket_dir() {
  local dir="$STATE/run"
  if [ ${#dir} -gt 80 ]; then
    if [ "$(id -u)" = 0 ]; then dir=$PRIVATE_PARENT/sock-$(echo "$STATE" | cksum | cut -d' ' -f1)
    else dir=/tmp/poopypals-citus-sock-$(id -u)-$(echo "$STATE" | cksum | cut -d' ' -f1); fi
  fi
  echo "$dir"
}

# The cluster owner: postgres when we are root, else ourselves.
owner() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }

# $1 exists as a folder of the cluster owner's alone (mode 700, not a link), created so if missing; else we stop:
# a folder someone else prepared is never trusted.
ensure_private_dir() {
  local dir=$1
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    mkdir -m 700 "$dir" || die "cannot create $dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  fi
  [ -d "$dir" ] && [ ! -L "$dir" ] && [ "$(stat -c %U "$dir")" = "$(owner)" ] && [ "$(stat -c %a "$dir")" = 700 ] \
    || die "$dir is not a folder of $(owner)'s alone (mode 700, not a link): remove it"
}

ensure_private_parent() {
  [ "$(id -u)" = 0 ] || return 0
  case "$STATE" in "$PRIVATE_PARENT"/*) ;; *) [ ${#STATE} -le 76 ] && return 0 ;; esac
  private_parent
}

# The server binaries: those of the PostgreSQL Citus is installed for (never read from the state folder, which
# the postgres user can write).
bindir() {
  local pg_config dir
  if pg_config=$(find_pg_config); then "$pg_config" --bindir; return 0; fi
  # Citus's own packages need no pg_config: the newest server of 15–17 with Citus beside it.
  for dir in /usr/lib/postgresql/17 /usr/lib/postgresql/16 /usr/lib/postgresql/15; do
    [ -x "$dir/bin/postgres" ] && [ -f "$dir/lib/citus.so" ] && { echo "$dir/bin"; return 0; }
  done
  die "no PostgreSQL 15–17 server with Citus installed"
}
node_port() {
  local port; port=$(cat "$STATE/$1/port")
  [[ "$port" =~ ^[0-9]{1,5}$ ]] || die "$STATE/$1/port does not hold a port"
  echo "$port"
}
node_running() { [ -f "$STATE/$1/data/postmaster.pid" ] && as_owner "$(bindir)/pg_ctl" -D "$STATE/$1/data" status >/dev/null 2>&1; }

# psql as the superuser over the private socket of node $1, database $2; SQL on stdin, psql's -v after.
node_psql() {
  local node=$1 database=$2; shift 2
  as_owner "$(bindir)/psql" -q -X -A -t -v ON_ERROR_STOP=1 -h "$(socket_dir)" -p "$(node_port "$node")" -U postgres -d "$database" "$@"
}

start_node() {
  local node=$1
  node_running "$node" && return 0
  ensure_private_dir "$(socket_dir)"  # gone after a reboot when it lives under /tmp
  # synchronous_commit on, whatever the configuration says (clusters made before it was): with it off, a shard move
  # (citus_rebalance_start, logical replication) lost inserts it had acknowledged, 5 of 2 333 made during the move
  # (CitusTests.aRebalanceWithWritesGoingOnLosesNothing; none in runs with it on). Likely: a commit not yet
  # flushed when the move's last catch-up begins is never sent to the new placement.
  as_owner "$(bindir)/pg_ctl" -D "$STATE/$node/data" -l "$STATE/$node/server.log" -w -t 60 -o "-c synchronous_commit=on" start >/dev/null \
    || { as_owner tail -20 "$STATE/$node/server.log" >&2 || true; die "the $node did not start"; }
}

init_cluster() {
  bindir >/dev/null
  [ "$(id -u)" != 0 ] || id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user"
  stop_cluster  # what a start interrupted half-way left running
  rm -rf "$STATE"
  ensure_private_parent
  ensure_private_dir "$STATE"
  # The nodes reach each other over this private socket folder (the postgres user's alone, trust), not over TCP:
  # Citus connects to a worker as the role the transaction switched to, and the service's roles have no password
  # (over TCP they cannot log in at all).
  local sockets; sockets=$(socket_dir)
  [ "$sockets" = "$STATE/run" ] || rm -rf "$sockets"
  ensure_private_dir "$sockets"
  local password port node
  password=$(random_hex 24)
  port=$BASE_PORT
  for node in "${NODES[@]}"; do
    port=$(first_free_port "$port")
    as_owner mkdir -m 700 "$STATE/$node"
    echo "$port" | as_owner tee "$STATE/$node/port" >/dev/null
    port=$((port + 1))
  done
  for node in "${NODES[@]}"; do
    say "initialising the $node in $STATE/$node/data (port $(node_port "$node"))"
    # Files in the state folder are written as its owner (root following a link planted there would not be).
    { as_owner "$(bindir)/initdb" -D "$STATE/$node/data" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 2>&1 || true; } | as_owner tee "$STATE/$node/initdb.log" >/dev/null
    [ -f "$STATE/$node/data/PG_VERSION" ] || { as_owner cat "$STATE/$node/initdb.log" >&2; die "initdb failed"; }
    # Throw-away, local-only, fast (never in production). wal_level logical: moving shards (the rebalancer)
    # replicates them logically. Prepared transactions: Citus commits a multi-node write with two-phase commit.
    as_owner tee -a "$STATE/$node/data/postgresql.conf" >/dev/null <<CONF

# --- poopypals throw-away Citus node ($node) ---
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
port = $(node_port "$node")
unix_socket_directories = '$sockets'
unix_socket_permissions = 0700
citus.local_hostname = '$sockets'
max_connections = 400
shared_buffers = 128MB
fsync = off
synchronous_commit = on
full_page_writes = off
wal_level = logical
max_prepared_transactions = 200
max_wal_senders = 10
max_replication_slots = 10
log_min_messages = warning
citus.node_conninfo = 'sslmode=prefer'
CONF
    start_node "$node"
    # The password goes through the environment, never a command line (ps shows those to every user).
    POOPYPALS_CITUS_PASSWORD=$password node_psql "$node" postgres >/dev/null <<'SQL'
\getenv pw POOPYPALS_CITUS_PASSWORD
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
SQL
    node_psql "$node" poopypals >/dev/null <<<"CREATE EXTENSION citus;"
  done
  node_psql coordinator poopypals -v sockets="$sockets" >/dev/null <<SQL
SELECT citus_set_coordinator_host(:'sockets', $(node_port coordinator));
SELECT citus_add_node(:'sockets', $(node_port worker1));
SELECT citus_add_node(:'sockets', $(node_port worker2));
SQL
  # Written last: a cluster without it is one whose start did not finish (started again from scratch).
  (umask 077; echo "postgresql://poopypals:${password}@127.0.0.1:$(node_port coordinator)/poopypals" | as_owner tee "$STATE/url" >/dev/null)
  say "Citus running: coordinator 127.0.0.1:$(node_port coordinator), workers $(node_port worker1) and $(node_port worker2)"
}

stop_cluster() {
  local node
  for node in "${NODES[@]}"; do
    if [ -d "$STATE/$node/data" ] && node_running "$node"; then
      as_owner "$(bindir)/pg_ctl" -D "$STATE/$node/data" -m fast -w -t 60 stop >/dev/null && say "$node stopped"
    fi
  done
  return 0
}

# A database name the commands below accept: plain, so it needs no quoting anywhere, and not the cluster's own.
valid_database() {
  [[ "${1:-}" =~ ^[a-z][a-z0-9_]{0,40}$ ]] && [ "$1" != poopypals ] && [ "$1" != postgres ] && [[ "$1" != template* ]] \
    || die "a database name is [a-z][a-z0-9_]{0,40}, not poopypals, postgres or template*: '${1:-}'"
}

create_database() {
  local name=$1 node pids=() pid failed=0
  for node in "${NODES[@]}"; do
    node_running "$node" || die "the $node is not running (scripts/citus.sh start)"
  done
  # Not propagated from the coordinator: each node gets its own, as scripts/citus.sh start made the first. The nodes
  # at once (CREATE EXTENSION citus takes most of a second on each: the tests' distributed stage makes one per test).
  for node in "${NODES[@]}"; do
    {
      node_psql "$node" postgres <<<"SET citus.enable_create_database_propagation = off; CREATE DATABASE $name OWNER poopypals;" >/dev/null &&
        node_psql "$node" "$name" <<<"CREATE EXTENSION citus;" >/dev/null
    } &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || die "could not create database $name on every node"
  node_psql coordinator "$name" -v sockets="$(socket_dir)" >/dev/null <<SQL
SELECT citus_set_coordinator_host(:'sockets', $(node_port coordinator));
SELECT citus_add_node(:'sockets', $(node_port worker1));
SELECT citus_add_node(:'sockets', $(node_port worker2));
SQL
  sed "s|/poopypals\$|/$name|" "$STATE/url"
}

drop_database() {
  local name=$1 node
  for node in "${NODES[@]}"; do
    node_running "$node" || continue
    # With the service roles the migrations made for it (sql/0022: poopypals_app_NAME, poopypals_profiles_NAME).
    node_psql "$node" postgres >/dev/null <<SQL
SET client_min_messages = warning;
SET citus.enable_create_database_propagation = off;
SET citus.enable_ddl_propagation = off;
DROP DATABASE IF EXISTS $name WITH (FORCE);
DROP ROLE IF EXISTS poopypals_app_$name, poopypals_profiles_$name;
SQL
  done
}

cmd=${1:-start}
locate_state
case "$cmd" in
  install) install_citus ;;
  start)
    install_citus
    if [ ! -f "$STATE/url" ]; then
      init_cluster
    else
      ensure_private_dir "$STATE"
      for node in "${NODES[@]}"; do start_node "$node"; done
      say "Citus running: coordinator 127.0.0.1:$(node_port coordinator)"
    fi
    cat "$STATE/url" ;;
  url) [ -f "$STATE/url" ] || die "no Citus cluster (scripts/citus.sh start)"; cat "$STATE/url" ;;
  superuser-url)
    [ -f "$STATE/url" ] || die "no Citus cluster (scripts/citus.sh start)"
    echo "postgresql:///poopypals?host=$(socket_dir)&port=$(node_port coordinator)&user=postgres" ;;
  socket-dir) socket_dir ;;
  createdb)
    [ -f "$STATE/url" ] || die "no Citus cluster (scripts/citus.sh start)"
    valid_database "${2:-}"; create_database "$2" ;;
  dropdb)
    [ -f "$STATE/url" ] || die "no Citus cluster (scripts/citus.sh start)"
    valid_database "${2:-}"; drop_database "$2" ;;
  status)
    if [ ! -f "$STATE/url" ]; then say "no Citus cluster in $STATE"; exit 0; fi
    for node in "${NODES[@]}"; do
      if node_running "$node"; then say "$node: running on 127.0.0.1:$(node_port "$node")"; else say "$node: stopped"; fi
    done
    if node_running coordinator; then
      node_psql coordinator poopypals <<<"SELECT 'worker ' || nodename || ' port ' || nodeport || CASE WHEN isactive THEN ' active' ELSE ' inactive' END FROM pg_dist_node WHERE groupid <> 0 ORDER BY nodeport" >&2
    fi ;;
  stop) [ -d "$STATE" ] && stop_cluster; exit 0 ;;
  reset)
    if [ -d "$STATE" ]; then stop_cluster; [ "$(socket_dir)" = "$STATE/run" ] || rm -rf "$(socket_dir)"; rm -rf "$STATE"; fi
    say "data removed" ;;
  *) die "unknown command $cmd (install, start, url, superuser-url, socket-dir, createdb, dropdb, status, stop, reset)" ;;
esac
