#!/usr/bin/env bash
# A local pg_auto_failover 2.0 formation for failover tests (scripts/failover.py): a monitor and three PostgreSQL 15
# nodes (a primary and two standbys, number_sync_standbys 1: every commit is on two nodes before it is acknowledged,
# also while one node is down), one PgBouncer (transaction pooling) per node, all on 127.0.0.1.
#
# Why three: with two nodes pg_auto_failover must keep number_sync_standbys at 0, and then a primary whose one
# standby is unhealthy is assigned wait_primary, which empties synchronous_standby_names: commits are acknowledged
# with one copy until the standby is back (measured: 6 s after a standby is killed), and lose that node then and
# they are gone. Worse, the monitor once took the standby it was promoting in a switchover for an unhealthy one,
# set the draining primary to wait_primary, and 1 717 writes it acknowledged alone were rewound away. With two
# standbys in the quorum (ANY 1), losing either keeps a synchronous copy; losing both blocks commits rather than
# acknowledge what could be lost.
#
#   scripts/cluster.sh install         apt-get install pg-auto-failover-cli, postgresql-15-auto-failover, pgbouncer
#                                      when missing (start does it itself)
#   scripts/cluster.sh start           ensure the formation runs with a primary and both secondaries in sync; print the
#                                      multi-host URL (target_session_attrs=read-write) on stdout
#   scripts/cluster.sh url | pgbouncer-url   the multi-host URL, direct or through the PgBouncers
#   scripts/cluster.sh pgbouncer-restart [defaults]   restart the PgBouncers (they cache their node's
#                                      in_hot_standby: see below); print pgbouncer-url. `defaults`: only what the
#                                      README requires (server_connect_timeout, query_wait_timeout at defaults)
#   scripts/cluster.sh status          which node is primary / secondary, with ports (pg_autoctl show state)
#   scripts/cluster.sh primary-port | secondary-port
#   scripts/cluster.sh node-pids PORT  the node's keeper, its postmaster and every backend (one a line)
#   scripts/cluster.sh kill-node PORT  kill -9 of all of them (a crash)
#   scripts/cluster.sh hang-node PORT  SIGSTOP of all of them, keeper included (the machine stalls, not just
#                                      PostgreSQL); resume-node PORT sends SIGCONT
#   scripts/cluster.sh restart-node PORT   start the node's keeper again after a kill: it rejoins as secondary
#   scripts/cluster.sh switchover      pg_autoctl perform switchover, bounded in time
#   scripts/cluster.sh primaries-sync [NAME]  each node (or NAME) taking writes: NAME PORT NOW LOADED
#                                      'synchronous_standby_names' ('' = commits acknowledged with one copy)
#   scripts/cluster.sh wait-healthy [SECONDS]   wait (default 60 s) for a primary and both secondaries in sync
#   scripts/cluster.sh backup [full|diff|incr]   a pgBackRest backup (default incr), from a standby
#   scripts/cluster.sh backups         what is restorable: each backup, and the span a restore can reach
#   scripts/cluster.sh verify          pgbackrest check and verify
#   scripts/cluster.sh restore --to 'YYYY-MM-DD HH:MM:SS+00' | --to-name NAME | --latest
#                                      rebuild the formation from the repository (node1 restored and promoted,
#                                      node2 and node3 fresh copies); prints the URL and how long it took
#   scripts/cluster.sh check           pgbackrest check: a WAL switch of the primary reaches the repository
#   scripts/cluster.sh sql 'SQL'       run SQL as the superuser on the primary (database poopypals)
#   scripts/cluster.sh fresh-database  make the app's database again, empty (make test, before its cluster stages)
#   scripts/cluster.sh destroy         kill every node and delete its data folder (a drill's total loss)
#   scripts/cluster.sh state-dir       where the state lives (below)
#   scripts/cluster.sh stop            stop everything by PID (pgbouncers, monitor, keepers, postgres); data kept
#   scripts/cluster.sh reset           stop and delete the state
#
# State lives in .cluster/ (or /var/lib/poopypals/cluster-<cksum of the checkout> when the postgres user cannot enter
# the checkout, as scripts/db.sh does for .pg): data folders, pg_autoctl's config (XDG_* point there), logs
# (monitor.log, node1.log ... node3.log are the keepers'; PostgreSQL's own are in <pgdata>/log/), PIDs, ports.
# Ports: the first free from 29300 (monitor), 29301-29303 (nodes), 29311-29313 (PgBouncers): below the
# kernel's ephemeral range (32768-60999 on Linux), so that no client socket of the load takes a node's port while
# it restarts after a kill (seen once with 543xx: the monitor could not bind its port on a restart under load).
# The project's other servers use 55432, 55418 and 555xx. Throw-away: fsync is off; synchronous_commit stays as
# pg_auto_failover sets it, because synchronous replication is what the failover tests are about.
# PgBouncer caches the startup parameters of its first server connection (in_hot_standby among them) and gives them
# to every login: after a failover libpq's target_session_attrs=read-write trusts that stale answer, so the
# PgBouncer URL can lead to the standby (25006) or to a dead node until the PgBouncers restart (pgbouncer-restart).
# Logins: the app role `poopypals` (LOGIN CREATEDB CREATEROLE, not a superuser, owner of the database `poopypals`,
# as scripts/db.sh makes it) authenticates with scram-sha-256 over TCP; pg_auto_failover's own roles and the
# local socket (a private folder) are trusted on loopback.
set -euo pipefail

NODES="node1 node2 node3"
PGBOUNCERS="pgbouncer1 pgbouncer2 pgbouncer3"

say() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BINDIR=/usr/lib/postgresql/15/bin
EXTENSION_CONTROL=/usr/share/postgresql/15/extension/pgautofailover.control
FALLBACK_STATE=$PRIVATE_PARENT/cluster-$(echo "$ROOT" | cksum | cut -d' ' -f1)

# --- failure detection, tuned for seconds (pg_auto_failover's defaults take ~50 s to fail over) ---------------
# Monitor (PostgreSQL GUCs of the pgautofailover extension, in milliseconds).
HEALTH_CHECK_PERIOD=1000        # default 5000: probe every node every second
HEALTH_CHECK_TIMEOUT=2000       # default 5000: connect timeout of a probe; a SIGSTOPped postmaster accepts TCP (the
                                # kernel does) but never answers, so this is what detects a hang. 2 s, not 1 s:
                                # this 2-core machine may be compiling Swift at the same time
HEALTH_CHECK_MAX_RETRIES=1      # default 2
HEALTH_CHECK_RETRY_DELAY=500    # default 2000
NODE_UNHEALTHY_TIMEOUT=4000     # default 20000: a node is failed over only when its probe fails AND its keeper has
                                # not reported for this long (a keeper reports every second: four missed reports)
PRIMARY_DEMOTE_TIMEOUT=8000     # default 30000: after deciding to fail over, how long the monitor waits for an
                                # unreachable primary to have demoted itself before promoting the standby
STARTUP_GRACE_PERIOD=2000       # default 10000: no failover decision this soon after the monitor starts
# Keeper (pg_autoctl config set, seconds).
NETWORK_PARTITION_TIMEOUT=4     # default 20: a primary that reaches neither the monitor nor any standby demotes
                                # itself after this long. The split-brain guard: it must stay BELOW the monitor's
                                # primary demote timeout (4 s < 8 s; the monitor only starts that clock after the
                                # 4 s unhealthy timeout, so an isolated primary is read-only ~8 s before a promotion)
PREPARE_PROMOTION_CATCHUP=5     # default 30: how long a standby about to be promoted waits to catch up
PREPARE_PROMOTION_WALRECEIVER=2 # default 5: how long it waits for its WAL receiver to stop
RESTART_FAILURE_TIMEOUT=5       # default 20: how long a keeper retries starting its PostgreSQL before reporting it
                                # down (postgresql_restart_failure_max_retries stays 3)
# There is no setting for the keeper's own loop: it reports to the monitor every second (compiled in), so there
# is no "replication.sleep" to tune.
# Measured here (2 cores): a killed primary is replaced ~13 s after the kill, a SIGSTOPped one ~14.5 s (declared
# unhealthy after ~4-5 s, then the 8 s demote timeout, then ~1 s promotion); a lost synchronous standby stalls
# commits ~4 s, until the primary is told to drop synchronous replication (wait_primary); `perform switchover`
# takes ~10 s in all, writes pause 1.5-6.5 s of it. A restarted old primary rejoins (pg_rewind) in ~1-5 s.

locate_state() {
  STATE=$ROOT/.cluster
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user (apt-get install postgresql-15 creates it)"
    # The postgres user must reach the data folders; a checkout under /root is not reachable: use root's
    # /var/lib/poopypals instead (never a /tmp path another user could have prepared).
    runuser -u postgres -- test -x "$ROOT" || STATE=$FALLBACK_STATE
  fi
  MONITOR_DATA=$STATE/monitor
  XDG=$STATE/xdg
  BACKREST=$STATE/backrest
}

# A short socket folder: Unix socket paths are limited to ~107 bytes.
socket_dir() {
  if [ -f "$STATE/socket_dir" ]; then cat "$STATE/socket_dir"; return; fi
  local dir=$STATE/run
  [ ${#dir} -le 80 ] || dir=$PRIVATE_PARENT/csock-$(echo "$STATE" | cksum | cut -d' ' -f1)
  echo "$dir"
}

# pg_autoctl finds its config, state and pid files through the XDG folders, and its local server through PGHOST.
autoctl_env() {
  echo HOME="$(getent passwd "$(as_owner id -un)" | cut -d: -f6)" XDG_CONFIG_HOME="$XDG/config" \
    XDG_DATA_HOME="$XDG/data" XDG_RUNTIME_DIR="$XDG/run" PGHOST="$SOCK" PGCONNECT_TIMEOUT=5
}
autoctl() {
  # shellcheck disable=SC2046  # autoctl_env prints NAME=value words without spaces
  as_owner env $(autoctl_env) pg_autoctl "$@"
}

# --- ports -----------------------------------------------------------------------------------------------
# The first port from $1 up, below 29400, that is not busy (common.sh's port_busy) nor among the other arguments.
pick_port() {
  local port=$1; shift
  while port_busy "$port" || [[ " $* " == *" $port "* ]]; do
    port=$((port + 1))
    [ "$port" -lt 29400 ] || die "no free port between $1 and 29399"
  done
  echo "$port"
}
port_of() { awk -v n="$1" '$1 == n { print $2 }' "$STATE/ports" 2>/dev/null; }
node_of_port() {
  local name; name=$(awk -v p="$1" '$2 == p && $1 ~ /^node/ { print $1 }' "$STATE/ports" 2>/dev/null)
  [ -n "$name" ] || die "no node of this cluster on port $1 (nodes: $(for n in $NODES; do printf '%s ' "$(port_of "$n")"; done))"
  echo "$name"
}

# --- processes ---------------------------------------------------------------------------------------------
# Alive and not a zombie (PID 1 here reaps orphans only every few seconds; kill -0 succeeds on a zombie).
alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
  local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }; [ "${stat%% *}" != Z ]
}
any_alive() { local pid; for pid in "$@"; do alive "$pid" && return 0; done; return 1; }
# The keeper (pg_autoctl run) of a node or the monitor, when running.
keeper_pid() {
  local pid; pid=$(cat "$STATE/$1.pid" 2>/dev/null || true)
  if alive "$pid" && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "pg_autoctl"; then echo "$pid"; fi
}
postmaster_pid() {
  local pid; pid=$(head -1 "$1/postmaster.pid" 2>/dev/null || true)
  if alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ]; then echo "$pid"; fi
}
# $@ and all their descendants (PostgreSQL's backends call setsid(), so sessions do not find them; parents do).
with_descendants() {
  [ $# -gt 0 ] || return 0
  ps -eo pid=,ppid=,stat= | awk -v roots="$*" '
    { parent[$1] = $2; zombie[$1] = ($3 ~ /^Z/) }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      do { added = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1 } } while (added)
      for (p in keep) if ((p in parent) && !zombie[p]) print p
    }' | sort -n
}
# Keeper processes first (the supervisor and its services), then PostgreSQL's, so a stop or kill leaves no window
# in which the keeper sees its PostgreSQL gone and restarts it.
node_pids() {
  local name=$1 roots=()
  local keeper; keeper=$(keeper_pid "$name")
  local pm; pm=$(postmaster_pid "$STATE/$name")
  [ -n "$keeper" ] && roots+=("$keeper")
  [ -n "$pm" ] && roots+=("$pm")
  local pids; pids=$(with_descendants "${roots[@]}")
  [ -n "$pids" ] || return 0
  local pid
  for pid in $pids; do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pg_autoctl ] && echo "$pid"; done
  for pid in $pids; do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != pg_autoctl ] && echo "$pid"; done
  return 0
}

# Start `pg_autoctl run` in the background, in a session of its own, as the postgres user; keep its PID and log.
launch_keeper() {
  local name=$1 pgdata=$2 log=$STATE/$1.log
  echo "=== $(date -u +%FT%TZ) pg_autoctl run (scripts/cluster.sh) ===" >>"$log"
  # shellcheck disable=SC2046
  if [ "$(id -u)" = 0 ]; then
    # setsid execs (a background job of a script is no group leader), setpriv execs: $! is pg_autoctl itself.
    setsid setpriv --reuid=postgres --regid=postgres --init-groups env $(autoctl_env) \
      pg_autoctl run --pgdata "$pgdata" >>"$log" 2>&1 </dev/null &
  else
    setsid env $(autoctl_env) pg_autoctl run --pgdata "$pgdata" >>"$log" 2>&1 </dev/null &
  fi
  echo $! >"$STATE/$name.pid"
  local deadline=$((SECONDS + 5))
  while [ -z "$(keeper_pid "$name")" ] && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  [ -n "$(keeper_pid "$name")" ] || { tail -20 "$log" >&2; die "the $name keeper did not start"; }
}

# --- monitor queries (always bounded: a hung node must not hang us) -------------------------------------------
psql_socket() {  # PORT SQL...  as the postgres superuser over the private socket, 5 s at most
  local port=$1; shift
  as_owner timeout 5 "$BINDIR/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$port" -U postgres "$@"
}
# name reported goal health, one node a line
node_states() {
  psql_socket "$(port_of monitor)" -d pg_auto_failover -F ' ' -c \
    "SELECT nodename, reportedstate, goalstate, health FROM pgautofailover.node ORDER BY nodeid" 2>/dev/null
}
node_in_state() {  # STATE... → the name of the node whose reported and assigned states are one of them
  node_states | awk -v want=" $* " 'index(want, " " $2 " ") && $2 == $3 { print $1; exit }'
}
port_in_state() { local n; n=$(node_in_state "$@"); [ -n "$n" ] && port_of "$n"; }

# Healthy: a primary and every other node a secondary, all as assigned and answering the monitor's probes, and
# every secondary streaming as a synchronous (quorum) standby of the primary.
healthy() {
  local states; states=$(node_states) || return 1
  local primary secondaries nodes
  nodes=$(echo "$NODES" | wc -w)
  primary=$(echo "$states" | awk '$2 == "primary" && $3 == "primary" && $4 == 1 { print $1; exit }')
  secondaries=$(echo "$states" | awk '$2 == "secondary" && $3 == "secondary" && $4 == 1 { n++ } END { print n + 0 }')
  [ -n "$primary" ] && [ "$secondaries" -eq $((nodes - 1)) ] || return 1
  local in_sync
  in_sync=$(psql_socket "$(port_of "$primary")" -d postgres -c \
    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')
       AND current_setting('synchronous_standby_names') <> ''" 2>/dev/null) || return 1
  [ "${in_sync:-0}" -ge $((nodes - 1)) ]
}

explain_timeout() {
  autoctl show state --monitor "$(monitor_url)" >&2 2>&1 || true
  local name
  for name in monitor $NODES; do
    [ -f "$STATE/$name.log" ] || continue
    echo "--- last lines of $STATE/$name.log" >&2; tail -15 "$STATE/$name.log" >&2
  done
}

wait_healthy() {
  local seconds=${1:-60} deadline
  deadline=$((SECONDS + seconds))
  until healthy; do
    [ $SECONDS -lt $deadline ] || { explain_timeout; die "no primary with both secondaries in sync after ${seconds}s"; }
    sleep 0.5
  done
}

monitor_url() { echo "postgres://autoctl_node@127.0.0.1:$(port_of monitor)/pg_auto_failover?sslmode=disable"; }

# --- install ---------------------------------------------------------------------------------------------
pgbouncer_bin() { command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }; }
missing_packages() {
  command -v pg_autoctl >/dev/null 2>&1 || echo pg-auto-failover-cli
  { [ -f "$EXTENSION_CONTROL" ] && [ -x "$BINDIR/postgres" ]; } || echo postgresql-15-auto-failover
  pgbouncer_bin >/dev/null || echo pgbouncer
  command -v pgbackrest >/dev/null 2>&1 || echo pgbackrest
}
install_packages() {
  local missing; missing=$(missing_packages | tr '\n' ' ')
  [ -n "${missing// /}" ] || return 0
  # shellcheck disable=SC2086  # one word per package
  apt_install $missing
}

# --- pgBackRest: continuous archiving, backups, point-in-time recovery ------------------------------------------
# One repository in $STATE/backrest/repo (production: S3/Azure/GCS, README "Backups and recovery"), encrypted
# (aes-256-cbc, the passphrase in the config, readable by the postgres user only), stanza `poopypals`. Every node
# archives with the same archive_command, a wrapper that finds its node from the folder PostgreSQL runs it in (its
# data folder), so whichever node is primary archives, on any timeline, with no step after a failover. And the
# standbys archive too (archive_mode = always; pgBackRest's archive-mode-check off, it accepts a segment pushed
# again with the same content): a standby marks what it received as archived, so with `on` the segments a killed
# primary had finished but not yet pushed would be missing from the repository, a gap no restore could cross.
# Three nodes pushing into one repository push the same segment at nearly the same moment (a standby finishes a
# segment as the primary does), and pgBackRest writes every file through one fixed temporary name
# (<file>.pgbackrest.tmp): two writers truncate and interleave two copies, each encrypted with its own salt, into one
# file that then fails to decrypt (a restore drill failed so, "CryptoError: unable to flush", in 2 of 6 runs). So
# the push is synchronous and holds a lock the nodes share for its segment (see write_push_wrapper): the second
# node finds the segment in the repository and only compares its checksum. Backups come from a standby
# (backup-standby) when one is healthy.
STANZA=poopypals
ARCHIVE_TIMEOUT=5s      # an idle primary still switches (and so archives) its WAL segment within 5 s of a commit:
                        # the bound on what a total loss costs. Its price: up to 12 segment switches a minute under
                        # a trickle of writes (16 MB files recycled locally, each a few KB compressed in the repository)
backrest() {  # pgbackrest ARGS..., as the postgres user, with this cluster's config and stanza
  as_owner pgbackrest --config="$BACKREST/pgbackrest.conf" --stanza=$STANZA "$@"
}
write_backrest_config() {
  as_owner mkdir -p "$BACKREST/repo" "$BACKREST/spool" "$BACKREST/lock" "$BACKREST/log"
  [ -f "$BACKREST/cipher" ] || random_hex 32 | as_owner tee "$BACKREST/cipher" >/dev/null
  local conf name i=0
  conf="[global]
repo1-path=$BACKREST/repo
repo1-cipher-type=aes-256-cbc
repo1-cipher-pass=$(cat "$BACKREST/cipher")
repo1-retention-full=2
compress-type=zst
archive-async=y
archive-mode-check=n
spool-path=$BACKREST/spool
lock-path=$BACKREST/lock
log-path=$BACKREST/log
log-level-console=warn
log-level-file=info
start-fast=y
backup-standby=y
process-max=2

[$STANZA]"
  for name in $NODES; do
    i=$((i + 1))
    conf="$conf
pg$i-path=$STATE/$name
pg$i-port=$(port_of "$name")
pg$i-socket-path=$SOCK
pg$i-user=postgres"
  done
  echo "$conf" | as_owner tee "$BACKREST/pgbackrest.conf" >/dev/null
  as_owner chmod 600 "$BACKREST/pgbackrest.conf" "$BACKREST/cipher"
  write_push_wrapper
}
# archive_command of every node: runs in the node's data folder (which names the node: its own lock folder). The
# lock is chosen by the file name's last character (a segment's last hex digit; .partial, .history and .backup files
# have their own), shared by the nodes of this host, so a push waits only for pushes of the same file or of one
# sixteen segments away. flock -w bounds the wait: a node hung while it holds one (SIGSTOP) makes the others fail
# that attempt after 60 s, and PostgreSQL tries again. (`pgbackrest check` insists that archive_command contains
# "pgbackrest": the wrapper's name does.)
# A segment of a timeline the node has left (a newer timeline's history file is in its pg_wal) that differs from
# the repository's copy (pgBackRest's error 45) is the tail a former primary wrote past the fork and no standby
# confirmed, or a standby's copy of it: the two agree up to the fork, which is all that recovery on any later
# timeline reads, and what follows it was never acknowledged. The repository's copy is kept and the push reported
# done: refused, it stopped that node's archiving for good (PostgreSQL archives in order), which make test's
# archive-race drill met once after the failover scenarios (2026-11-29: 38 failed pushes of one segment). On the
# node's own timeline, error 45 stays an error.
write_push_wrapper() {
  as_owner tee "$BACKREST/pgbackrest-push" >/dev/null <<PUSH
#!/bin/sh
# archive_command of every node of this cluster (scripts/cluster.sh write_push_wrapper).
node=\$(basename "\$PWD")
file=\$(basename "\$1")
last=\$(printf '%s' "\$file" | tail -c 1)
case "\$last" in [0-9A-Za-z]) ;; *) last=other ;; esac
mkdir -p "$BACKREST/lock/\$node" || exit 1
flock -w 60 "$BACKREST/lock/push-\$last" pgbackrest --config="$BACKREST/pgbackrest.conf" --stanza=$STANZA \\
  --pg1-path="\$PWD" --no-archive-async --lock-path="$BACKREST/lock/\$node" archive-push "\$1"
status=\$?
if [ "\$status" = 45 ] && printf '%s' "\$file" | grep -Eq '^[0-9A-F]{24}\$'; then
  timeline=\$(printf '%d' "0x\$(printf '%s' "\$file" | cut -c1-8)")
  newest=\$(ls pg_wal 2>/dev/null | sed -n 's/^\([0-9A-F]\{8\}\)\.history\$/\1/p' | sort | tail -n 1)
  if [ -n "\$newest" ] && [ "\$(printf '%d' "0x\$newest")" -gt "\$timeline" ]; then
    echo "pgbackrest-push: \$file differs from the repository's copy, on timeline \$timeline, which this node has left: the repository's copy is kept" >&2
    exit 0
  fi
fi
exit \$status
PUSH
  as_owner chmod 700 "$BACKREST/pgbackrest-push"
}
archive_settings() {
  cat <<CONF
# --- continuous archiving to pgBackRest (scripts/cluster.sh): every node, standbys included (see the script) ---
archive_mode = always
archive_command = '"$BACKREST/pgbackrest-push" %p'
archive_timeout = '$ARCHIVE_TIMEOUT'
CONF
}
# stanza-create is idempotent (an existing stanza of the same database is fine); check proves a WAL switch
# reaches the repository.
create_stanza() {
  backrest_logged stanza stanza-create
  backrest_logged stanza check
}
# pgbackrest COMMAND... with its output appended to $BACKREST/LOG.log; on failure the log's end, and die.
backrest_logged() {
  local log=$BACKREST/$1.log; shift
  backrest "$@" >>"$log" 2>&1 || { tail -20 "$log" >&2; die "pgbackrest $1 failed"; }
}

# --- creation --------------------------------------------------------------------------------------------
# pg_autoctl sizes shared_buffers & co. from the host (25% of its memory: 6 GB here, per server) and starts
# PostgreSQL with the default socket folder. Our own initdb lets these lines apply from the very first start:
# pg_autoctl includes its file at the top of postgresql.conf, so what we append wins. A standby's copy comes
# from pg_basebackup, so these lines and pg_hba.conf hold on every node.
server_settings() {
  cat <<CONF

# --- poopypals failover cluster (scripts/cluster.sh): throw-away, local-only ---
shared_buffers = 128MB
work_mem = 4MB
maintenance_work_mem = 64MB
effective_cache_size = 1GB
unix_socket_directories = '$SOCK'
unix_socket_permissions = 0700
fsync = off
# pg_basebackup (a standby's first copy) waits for a spread checkpoint: 90 s and more with the default 0.9.
checkpoint_completion_target = 0
# synchronous_commit is left as pg_auto_failover sets it (on): synchronous replication is the point.
# full_page_writes stays on: pg_rewind (an old primary rejoining) needs it.
wal_keep_size = '512MB'
# A silent peer (a SIGSTOPped primary) is noticed in 10 s instead of 60 s (pg_auto_failover sets 30 s).
wal_sender_timeout = '10s'
wal_receiver_timeout = '10s'
CONF
}

init_data() {  # PGDATA
  as_owner "$BINDIR/initdb" -D "$1" -U postgres -E UTF8 --locale=C.UTF-8 --auth=trust >"$STATE/initdb.log" 2>&1 \
    || { cat "$STATE/initdb.log" >&2; die "initdb $1 failed"; }
  server_settings | as_owner tee -a "$1/postgresql.conf" >/dev/null
}

create_monitor() {
  init_data "$MONITOR_DATA"
  as_owner tee -a "$MONITOR_DATA/postgresql.conf" >/dev/null <<CONF
pgautofailover.health_check_period = $HEALTH_CHECK_PERIOD
pgautofailover.health_check_timeout = $HEALTH_CHECK_TIMEOUT
pgautofailover.health_check_max_retries = $HEALTH_CHECK_MAX_RETRIES
pgautofailover.health_check_retry_delay = $HEALTH_CHECK_RETRY_DELAY
pgautofailover.node_considered_unhealthy_timeout = $NODE_UNHEALTHY_TIMEOUT
pgautofailover.primary_demote_timeout = $PRIMARY_DEMOTE_TIMEOUT
pgautofailover.startup_grace_period = $STARTUP_GRACE_PERIOD
CONF
  # --listen is missing from create monitor's help, yet needed: the default listens on every interface.
  autoctl create monitor --pgctl "$BINDIR/pg_ctl" --pgdata "$MONITOR_DATA" --pgport "$(port_of monitor)" \
    --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl >>"$STATE/monitor.log" 2>&1 \
    || { tail -20 "$STATE/monitor.log" >&2; die "pg_autoctl create monitor failed"; }
}

create_node() {  # NAME
  local name=$1 pgdata=$STATE/$1
  if [ "$name" = node1 ] && [ ! -f "$pgdata/PG_VERSION" ]; then
    init_data "$pgdata"
    archive_settings | as_owner tee -a "$pgdata/postgresql.conf" >/dev/null
    # First match wins: the app login needs its password over TCP; pg_auto_failover's roles (health checks,
    # replication, pg_rewind) and the private socket are trusted on loopback only.
    as_owner tee "$pgdata/pg_hba.conf" >/dev/null <<'HBA'
# scripts/cluster.sh (pg_autoctl --skip-pg-hba leaves this file alone; standbys get a copy)
local   all           all                         trust
host    all           poopypals   127.0.0.1/32    scram-sha-256
host    all           all         127.0.0.1/32    trust
local   replication   all                         trust
host    replication   all         127.0.0.1/32    trust
HBA
  fi  # node2 and node3 are made by pg_basebackup from node1: their folders must not exist
  # shellcheck disable=SC2046
  as_owner timeout 120 env $(autoctl_env) pg_autoctl create postgres --pgctl "$BINDIR/pg_ctl" --pgdata "$pgdata" \
    --pgport "$(port_of "$name")" --listen 127.0.0.1 --hostname 127.0.0.1 --name "$name" \
    --monitor "$(monitor_url)" --skip-pg-hba --no-ssl --username postgres --dbname postgres \
    >>"$STATE/$name.log" 2>&1 || { tail -25 "$STATE/$name.log" >&2; die "pg_autoctl create postgres ($name) failed"; }
  local setting
  for setting in "timeout.network_partition_timeout $NETWORK_PARTITION_TIMEOUT" \
                 "timeout.prepare_promotion_catchup $PREPARE_PROMOTION_CATCHUP" \
                 "timeout.prepare_promotion_walreceiver $PREPARE_PROMOTION_WALRECEIVER" \
                 "timeout.postgresql_restart_failure_timeout $RESTART_FAILURE_TIMEOUT"; do
    # shellcheck disable=SC2086
    autoctl config set --pgdata "$pgdata" $setting >/dev/null 2>>"$STATE/$name.log" \
      || die "pg_autoctl config set $setting ($name) failed"
  done
}

wait_node_state() {  # NAME STATE SECONDS
  local deadline=$((SECONDS + $3))
  until node_states | awk -v n="$1" -v s="$2" '$1 == n && $2 == s && $3 == s { found = 1 } END { exit !found }' \
        && psql_socket "$(port_of "$1")" -d postgres -c "SELECT 1" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { explain_timeout; die "$1 did not reach state $2 within $3 s"; }
    sleep 0.3
  done
}

create_cluster() {
  say "creating a pg_auto_failover formation in $STATE"
  stop_all quiet
  rm -rf "$STATE" "$(socket_dir)"
  if [ "$(id -u)" = 0 ]; then case "$STATE$(socket_dir)" in *"$PRIVATE_PARENT"/*) private_parent ;; esac; fi
  mkdir -p "$STATE" "$XDG/config" "$XDG/data" "$XDG/run"
  SOCK=$(socket_dir); mkdir -p "$SOCK"; echo "$SOCK" >"$STATE/socket_dir"
  local taken=() port name i=0
  port=$(pick_port 29300); taken+=("$port"); echo "monitor $port" >"$STATE/ports"
  for name in $NODES $PGBOUNCERS; do
    i=$((i + 1)); [ "$name" = pgbouncer1 ] && i=11
    port=$(pick_port $((29300 + i)) "${taken[@]}"); taken+=("$port"); echo "$name $port" >>"$STATE/ports"
  done
  local n1; n1=$(port_of node1)
  random_hex 24 >"$STATE/password"
  [ "$(id -u)" = 0 ] && chown -R postgres: "$STATE" "$SOCK"
  chmod 700 "$STATE" "$SOCK"

  write_backrest_config
  start_monitor_and_node1
  # The app's login, made on the primary before the standby exists, so the base backup carries it.
  # The password goes through the environment, never a command line (ps shows those to every user).
  POOPYPALS_DB_PASSWORD=$(cat "$STATE/password") as_owner timeout 10 "$BINDIR/psql" -q -X -v ON_ERROR_STOP=1 \
    -h "$SOCK" -p "$n1" -U postgres -d postgres >/dev/null <<'SQL'
\getenv pw POOPYPALS_DB_PASSWORD
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
\c poopypals
-- `poopypals migrate` marks a restore point before it changes anything (README "Backups and recovery").
GRANT EXECUTE ON FUNCTION pg_catalog.pg_create_restore_point(text) TO poopypals;
SQL
  join_standbys
}

# A new monitor, and node1 registered (made by initdb, or a restored data folder) until it is `single`.
start_monitor_and_node1() {
  create_monitor
  launch_keeper monitor "$MONITOR_DATA"
  create_node node1
  launch_keeper node1 "$STATE/node1"
  wait_node_state node1 single 120
}

# node2 and node3 as fresh copies of node1, one at a time: the second joins once the first is a secondary (the
# monitor then raises number_sync_standbys to 1 by itself; it is set here so that it never depends on that).
# Then the stanza, and the formation is made.
join_standbys() {
  local name
  for name in node2 node3; do
    create_node "$name"
    launch_keeper "$name" "$STATE/$name"
    wait_node_state "$name" secondary 120
  done
  autoctl set formation number-sync-standbys 1 --monitor "$(monitor_url)" >>"$STATE/monitor.log" 2>&1 \
    || die "pg_autoctl set formation number-sync-standbys 1 failed"
  create_stanza
  touch "$STATE/created"
}

# --- PgBouncer, one per node, like scripts/db.sh start_pgbouncer --------------------------------------------
pgbouncer_pid() { local pid; pid=$(cat "$STATE/$1/pgbouncer.pid" 2>/dev/null || true); alive "$pid" && echo "$pid"; return 0; }
start_pgbouncer() {  # pgbouncerN [defaults] (in front of nodeN)
  local name=$1 node=node${1#pgbouncer} dir=$STATE/$1 mode=${2:-tuned}
  [ -z "$(pgbouncer_pid "$name")" ] || return 0
  local bin; bin=$(pgbouncer_bin) || die "pgbouncer not found"
  local port attempt
  port=$(port_of "$name")
  as_owner mkdir -p "$dir"
  echo "\"poopypals\" \"$(cat "$STATE/password")\"" | as_owner tee "$dir/userlist.txt" >/dev/null
  as_owner chmod 600 "$dir/userlist.txt"
  # server_login_retry (default 15 s) is how long PgBouncer refuses logins after one failed connect to its node;
  # server_connect_timeout (15 s) and query_wait_timeout (120 s) bound a client waiting for a server. `defaults`
  # leaves the last two at PgBouncer's defaults and keeps only what the README requires (failover.py
  # --pgbouncer-defaults: the service must not depend on them). server_login_retry is required since the formation
  # has two standbys: in a failover pg_auto_failover restarts every standby (report_lsn), so every PgBouncer sees a
  # failed login at once, and at 15 s all of them refused writes for 15 s (measured: 15.6 s).
  local tuning="server_login_retry = 1
server_connect_timeout = 3
query_wait_timeout = 15"
  [ "$mode" = defaults ] && tuning="server_login_retry = 1
; PgBouncer's defaults: server_connect_timeout, query_wait_timeout"
  for attempt in $(seq 10); do
    as_owner tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$(port_of "$node")

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
$tuning
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    launch_pgbouncer "$dir" "$bin" "$port" "$name" && break
    # shellcheck disable=SC2046
    port=$(pick_port $((port + 1)) $(awk '{ print $2 }' "$STATE/ports"))
    sed -i "s/^$name .*/$name $port/" "$STATE/ports"
  done
  port_in_use "$port" || die "$name found no port to listen on after $attempt tries"
}

app_url() {  # NAME... → the multi-host URL over their ports ($NODES or $PGBOUNCERS)
  local hosts="" name
  for name in "$@"; do hosts="$hosts,127.0.0.1:$(port_of "$name")"; done
  echo "postgresql://poopypals:$(cat "$STATE/password")@${hosts#,}/poopypals?target_session_attrs=read-write"
}

# --- start / stop ----------------------------------------------------------------------------------------
start_cluster() {
  install_packages
  [ -x "$BINDIR/pg_ctl" ] || die "$BINDIR/pg_ctl not found (apt-get install postgresql-15)"
  if [ -f "$STATE/created" ] && { [ -z "$(port_of node3)" ] || [ ! -f "$BACKREST/pgbackrest.conf" ]; }; then
    say "$STATE holds a formation of an older version of this script (two nodes, or no archiving): making it again"
    rm -f "$STATE/created"
  fi
  if [ ! -f "$STATE/created" ]; then
    # Never over a repository: it may be all that is left of the data (restore it, or reset to delete it).
    [ ! -d "$BACKREST/repo/archive" ] || die "$STATE holds a backup repository but no formation: scripts/cluster.sh restore --latest (or reset, which deletes the backups)"
    create_cluster
  else
    SOCK=$(socket_dir); mkdir -p "$SOCK"; [ "$(id -u)" = 0 ] && chown postgres: "$SOCK"
    [ ! -f "$STATE/restoring" ] || die "a restore did not finish ($(cat "$STATE/restoring")); nothing runs: run it again (scripts/cluster.sh restore ...) or reset"
    write_push_wrapper  # a formation made by an older version of this script gets the current one
    local name
    for name in $NODES; do [ -f "$STATE/$name.stopped" ] && resume_node "$name"; done
    [ -n "$(keeper_pid monitor)" ] || { say "starting the monitor"; launch_keeper monitor "$MONITOR_DATA"; }
    for name in $NODES; do
      [ -n "$(keeper_pid "$name")" ] || { say "starting $name"; launch_keeper "$name" "$STATE/$name"; }
    done
  fi
  for name in $PGBOUNCERS; do start_pgbouncer "$name"; done
  wait_healthy 90
  # shellcheck disable=SC2086
  local url; url=$(app_url $NODES)
  PGCONNECT_TIMEOUT=5 timeout 10 "$BINDIR/psql" "$url" -X -A -t -q -c "SELECT 1" >/dev/null \
    || die "the formation is healthy but the app login does not connect: $STATE/node*/log/"
  say "primary on 127.0.0.1:$(port_in_state primary), secondaries $(node_states | awk '$2 == "secondary" { print $1 }' | while read -r n; do printf '127.0.0.1:%s ' "$(port_of "$n")"; done)(synchronous, ANY 1)"
  echo "$url"
}

# Stop in this order: PgBouncers, the monitor (so no failover starts while the nodes go), then both keepers,
# which stop their PostgreSQL (fast mode). Whatever is still there after 20 s is killed; then nothing may remain.
stop_all() {
  local quiet=${1:-}
  [ -d "$STATE" ] || return 0
  local name pid pids
  for name in $NODES; do [ -f "$STATE/$name.stopped" ] && resume_node "$name"; done
  for name in $PGBOUNCERS; do
    pid=$(pgbouncer_pid "$name"); [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for name in monitor $NODES; do
    pid=$(keeper_pid "$name"); [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    if [ "$name" = monitor ]; then
      local deadline=$((SECONDS + 10))
      while [ -n "$(keeper_pid monitor)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    fi
  done
  local deadline=$((SECONDS + 20))
  while [ $SECONDS -lt $deadline ]; do
    pids=$(leftover_pids)
    [ -n "$pids" ] || break
    sleep 0.3
  done
  pids=$(leftover_pids)
  if [ -n "$pids" ]; then
    say "killing what did not stop: $(echo "$pids" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  fi
  pids=$(leftover_pids)
  [ -z "$pids" ] || die "still running after stop: $(echo "$pids" | tr '\n' ' ')"
  [ -n "$quiet" ] || say "stopped (nothing of $STATE runs)"
}

# Every process of this cluster: keepers, postmasters and their children, pgbouncers; also anything whose
# command line or working folder is in $STATE (a backend's cwd is its data folder).
leftover_pids() {
  local roots=() name pid
  for name in monitor $NODES; do
    pid=$(keeper_pid "$name"); [ -n "$pid" ] && roots+=("$pid")
    pid=$(postmaster_pid "$STATE/$name"); [ -n "$pid" ] && roots+=("$pid")
  done
  for name in $PGBOUNCERS; do pid=$(pgbouncer_pid "$name"); [ -n "$pid" ] && roots+=("$pid"); done
  {
    with_descendants "${roots[@]}"
    for pid in /proc/[0-9]*; do
      pid=${pid#/proc/}
      [ "$pid" = $$ ] && continue
      local cwd; cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
      case "$cwd/" in "$STATE"/*) echo "$pid"; continue ;; esac
      { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qE "(pg_autoctl|postgres|pgbouncer|pgbackrest).*$STATE/" && echo "$pid"
    done
    true
  } | sort -un | while read -r pid; do
    # Never this script or its callers (their cwd may be in the checkout, not in $STATE).
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in pg_autoctl|postgres|pgbouncer|pgbackrest) echo "$pid" ;; esac
  done
}

# --- faults ----------------------------------------------------------------------------------------------
kill_node() {
  local name=$1 pids attempt
  for attempt in 1 2 3; do
    pids=$(node_pids "$name")
    [ -n "$pids" ] || break
    # Freeze first, so no process of the node reacts (restarts, forks) while the others die.
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    # (20 s a round: a make test once saw ten of node3's processes outlive three rounds of 5 s, gone minutes later;
    # a process in uninterruptible I/O dies only when its I/O ends.)
    local deadline=$((SECONDS + 20))
    # shellcheck disable=SC2086
    while any_alive $pids && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
  done
  pids=$(node_pids "$name")
  # What each survivor is doing: its state (D: in uninterruptible I/O), where in the kernel it waits, its age.
  # shellcheck disable=SC2086
  [ -z "$pids" ] || die "$name still has processes after three rounds of SIGKILL: $(ps -o pid=,stat=,wchan:24=,etime=,comm= -p "$(echo $pids | tr ' ' ,)" | tr -s ' ' | paste -sd ';')"
  rm -f "$STATE/$name.stopped"
  say "$name (port $(port_of "$name")) killed with SIGKILL"
}

hang_node() {
  local name=$1 pids
  pids=$(node_pids "$name")
  [ -n "$pids" ] || die "$name is not running"
  echo "$pids" >"$STATE/$name.stopped"
  # shellcheck disable=SC2086
  kill -STOP $pids
  say "$name (port $(port_of "$name")) stopped with SIGSTOP: keeper, postmaster and backends ($(echo "$pids" | wc -l) processes)"
}

resume_node() {
  local name=$1 pids
  pids=$( { cat "$STATE/$name.stopped" 2>/dev/null || true; node_pids "$name"; } | sort -un)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -CONT $pids 2>/dev/null || true
  rm -f "$STATE/$name.stopped"
  say "$name resumed with SIGCONT"
}

restart_node() {
  local name=$1
  [ -f "$STATE/$name.stopped" ] && resume_node "$name"
  if [ -n "$(keeper_pid "$name")" ]; then say "$name's keeper is running"; return 0; fi
  # A killed postmaster may still be a zombie (PID 1 reaps orphans late); PostgreSQL takes any process with the
  # PID in postmaster.pid for a live server and refuses to start, so wait for it to be gone.
  local old; old=$(head -1 "$STATE/$name/postmaster.pid" 2>/dev/null || true)
  local deadline=$((SECONDS + 15))
  while [ -n "$old" ] && kill -0 "$old" 2>/dev/null && [ "$(cat "/proc/$old/comm" 2>/dev/null)" = postgres ] \
        && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  SOCK=$(socket_dir)
  launch_keeper "$name" "$STATE/$name"
  say "$name's keeper started again; it rejoins as a secondary (scripts/cluster.sh wait-healthy)"
}

# Whether the formation has switched away from the primary on port $1: another node primary, every other node a
# secondary in sync (`healthy`).
switched_from() { local now; now=$(port_in_state primary) && [ "$now" != "${1:-}" ] && healthy; }

# Stops a process and everything it started, the youngest first.
stop_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do stop_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

switchover() {
  local before; before=$(port_in_state primary wait_primary single) || true
  local lines=0
  [ ! -f "$STATE/switchover.log" ] || lines=$(wc -l <"$STATE/switchover.log")
  # pg_autoctl waits (--wait, seconds) for the new primary; timeout bounds it if the monitor does not answer. Its own
  # wait can miss the monitor's notifications (pg_auto_failover issues 604 and 620; make test of 2026-11-30: its
  # notifications showed the new primary and both secondaries at their goal 3 s in, and it failed about a minute
  # later, at its --wait), so the formation's state decides, asked while pg_autoctl waits: once it has switched,
  # pg_autoctl has 5 s more to end by itself, then it is stopped (the switchover is the monitor's work; pg_autoctl only
  # watches it). Until 2026-11-30 such a wait was waited out: a minute more in one make test of four.
  # shellcheck disable=SC2046
  as_owner timeout 75 env $(autoctl_env) pg_autoctl perform switchover --monitor "$(monitor_url)" --wait 60 \
    >>"$STATE/switchover.log" 2>&1 &
  local waiter=$! switched_at="" stopped="" status=0
  while kill -0 "$waiter" 2>/dev/null; do
    if [ -z "$switched_at" ]; then
      if switched_from "$before"; then switched_at=$SECONDS; fi
    elif [ $((SECONDS - switched_at)) -ge 5 ]; then
      stop_tree "$waiter"
      stopped=1
      break
    fi
    sleep 0.5
  done
  wait "$waiter" || status=$?
  if [ "$status" -ne 0 ]; then
    # Failed, or stopped above: the formation's state decides, within 15 s. What pg_autoctl said is kept, without its
    # table of notifications.
    local said deadline=$((SECONDS + 15))
    said=$(tail -n +"$((lines + 1))" "$STATE/switchover.log" | grep -v -E '^ *[0-9:]+ \| |^-+\+|^ *Time \|' | tail -8)
    until switched_from "$before" || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
    if ! switched_from "$before"; then
      tail -15 "$STATE/switchover.log" >&2
      die "pg_autoctl perform switchover failed"
    elif [ -n "$stopped" ]; then
      say "the formation switched; pg_autoctl perform switchover, still waiting 5 s after, was stopped (its wait missed a notification)"
    else
      say "pg_autoctl perform switchover exited with an error, yet the formation switched (its wait missed a notification): ${said//$'\n'/ / }"
    fi
  fi
  say "switchover done: primary was 127.0.0.1:${before:-?}, is 127.0.0.1:$(port_in_state primary wait_primary || echo '?')"
}

# Every answering node that takes writes (not in recovery, not read-only by default), one a line:
# "NAME PORT NOW LOADED 'synchronous_standby_names'": NOW is the server's clock when it read the setting, LOADED when
# it last loaded its configuration (pg_conf_load_time(): synchronous_standby_names changes only so), both in seconds
# since the epoch, so that a window's edges come from the server rather than from when a sample ran (failover.py).
# An empty value means it acknowledges commits that exist on it alone
# (pg_auto_failover's wait_primary of a formation whose number_sync_standbys is 0): failover.py watches for it.
# Left out: a node that does not answer within 2 s (hung, down), and a promoted node that pg_auto_failover keeps
# read-only (default_transaction_read_only) until a standby follows it: neither acknowledges a write.
primaries_sync() {  # [NAME]: that node only
  local name port value
  for name in $(awk -v only="${1:-}" '$1 ~ /^node[0-9]+$/ && (only == "" || $1 == only) { print $1 }' "$STATE/ports"); do
    port=$(port_of "$name")
    value=$(as_owner timeout 2 "$BINDIR/psql" -X -A -t -q -h "$SOCK" -p "$port" -U postgres -d postgres -c \
      "SELECT extract(epoch FROM clock_timestamp()) || ' ' || extract(epoch FROM pg_conf_load_time()) || ' '
         || quote_literal(current_setting('synchronous_standby_names')) WHERE NOT pg_is_in_recovery()
         AND NOT current_setting('default_transaction_read_only')::boolean" \
      2>/dev/null) || continue
    [ -n "$value" ] && echo "$name $port $value"
  done
  return 0
}

# --- backups and restore ---------------------------------------------------------------------------------
take_backup() {  # [full|diff|incr]
  local type=${1:-incr}
  case "$type" in full|diff|incr) ;; *) die "usage: scripts/cluster.sh backup [full|diff|incr]" ;; esac
  local started=$SECONDS
  # From a standby (backup-standby): the primary only starts and stops the backup.
  backrest_logged backup backup --type="$type"
  say "$type backup done in $((SECONDS - started)) s: $(backrest info --output=json | python3 -c '
import json, sys
b = json.load(sys.stdin)[0]["backup"][-1]
print(b["label"], "from", b["archive"]["start"], "to", b["archive"]["stop"])')"
}

# What is restorable: each backup, and the span of time a restore can reach (from the oldest backup's end to the
# newest archived WAL). pgBackRest's own info, then one line per backup and the span.
list_backups() {
  backrest info --output=json | python3 -c '
import datetime, json, sys
info = json.load(sys.stdin)
if not info or not info[0].get("backup"):
    print("no backup yet: scripts/cluster.sh backup full"); sys.exit(1)
stanza = info[0]
ts = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S+00")
for b in stanza["backup"]:
    print("{:<34} {:<5} ended {}  WAL {}..{}".format(b["label"], b["type"], ts(b["timestamp"]["stop"]),
                                                     b["archive"]["start"], b["archive"]["stop"]))
archive = [a for a in stanza.get("archive", []) if a.get("max")]
newest = max((a["max"] for a in archive), default="none")
oldest = ts(stanza["backup"][0]["timestamp"]["stop"])
print("restorable: from {} to the newest archived WAL {} (restore --latest)".format(oldest, newest))'
}

# pgBackRest 2.45's verify exits 0 whatever it finds (measured: a segment with 100 bytes flipped, "invalid result …
# Data corruption detected", "status: error", exit 0): its report is read here, and an invalid file fails.
verify_repository() {
  backrest_logged check check
  local report
  report=$(backrest --log-level-console=info verify 2>&1) || { echo "$report" | tail -20 >&2; die "pgbackrest verify failed"; }
  echo "$report" >>"$BACKREST/check.log"
  if echo "$report" | grep -qE "invalid result|status: error"; then
    echo "$report" | grep -E "invalid result|status:|total WAL|total valid|missing|checksum" | cut -c1-300 | head -20 >&2
    die "pgbackrest verify found files in the repository that do not read back"
  fi
  # (2.45 prints a status only when something is wrong; its end line otherwise.)
  echo "$report" | grep -q "verify command end: completed successfully" || { echo "$report" | tail -20 >&2; die "pgbackrest verify did not say it completed"; }
  say "check (a WAL switch reached the repository) and verify (every file of every backup and WAL reads back) passed"
}

# What the restored node1 said: pg_ctl's file holds only the logging collector's hand-over, so also the end of the
# server's own newest log (its FATAL line says why recovery stopped).
restore_log_tail() {
  tail -20 "$STATE/node1-restore.log" >&2 || true
  local newest
  newest=$(ls -t "$STATE/node1/log/" 2>/dev/null | head -1)
  [ -z "$newest" ] || { echo "cluster: the end of node1's log/$newest:" >&2; tail -25 "$STATE/node1/log/$newest" >&2 || true; }
}

# Rebuild the formation from the repository: stop everything, restore node1's data folder to the target, let it
# replay and promote alone, then make the formation around it as `start` does (a new monitor, node1 registered as
# it is, node2 and node3 fresh copies of it), with the same ports and logins. The repository, its config, the
# ports and the password are kept; everything else is made again.
restore_cluster() {
  [ -f "$BACKREST/pgbackrest.conf" ] || die "no backup repository in $BACKREST"
  local target=() what
  case "${1:-}" in
    --to) [ -n "${2:-}" ] || die "usage: restore --to 'YYYY-MM-DD HH:MM:SS+00'"
          target=(--type=time "--target=$2" --target-action=promote); what="the time $2" ;;
    --to-name) [ -n "${2:-}" ] || die "usage: restore --to-name NAME"
          target=(--type=name "--target=$2" --target-action=promote); what="the restore point $2" ;;
    --latest) target=(--type=default); what="the newest archived WAL" ;;
    *) die "usage: scripts/cluster.sh restore --to 'YYYY-MM-DD HH:MM:SS+00' | --to-name NAME | --latest" ;;
  esac
  local started=$SECONDS
  say "restoring to $what"
  stop_all quiet
  # Until the formation stands again, `start` refuses (the monitor and the nodes' keeper configs are gone, so it
  # could only wait for keepers that cannot run) and says so.
  echo "$what, begun $(date -u '+%F %T+00')" | as_owner tee "$STATE/restoring" >/dev/null
  local keep
  for keep in "$STATE"/*; do
    # `created` stays: a restore that fails part-way is run again (restore), never answered by `start` making a
    # new formation (which would delete the repository).
    case "$(basename "$keep")" in backrest|ports|password|socket_dir|created|restoring) ;; *) rm -rf "$keep" ;; esac
  done
  rm -rf "$BACKREST/spool" "$BACKREST/lock"
  SOCK=$(socket_dir); mkdir -p "$SOCK" "$XDG/config" "$XDG/data" "$XDG/run" "$BACKREST/spool" "$BACKREST/lock"
  [ "$(id -u)" = 0 ] && chown -R postgres: "$STATE" "$SOCK"
  # The replay fetches each segment itself (--no-archive-async), not through the asynchronous queue in the spool:
  # there two fetchers once raced on one segment ("unable to move missing source ….pgbackrest.tmp", segments 70 and
  # 71, CI of 27d6a40), recovery found the restore point's segment missing and stopped short of the target.
  backrest_logged restore restore --pg1-path="$STATE/node1" --target-timeline=latest "${target[@]}" \
    "--recovery-option=restore_command=pgbackrest --config=$BACKREST/pgbackrest.conf --pg1-path=$STATE/node1 --stanza=$STANZA --no-archive-async archive-get %f \"%p\""
  # Alone first: replay to the target and promote. The copy came from a standby: its standby settings go.
  as_owner rm -f "$STATE/node1/standby.signal" "$STATE/node1/postgresql-auto-failover-standby.conf"
  as_owner touch "$STATE/node1/postgresql-auto-failover-standby.conf"
  as_owner "$BINDIR/pg_ctl" -D "$STATE/node1" -w -t 300 -l "$STATE/node1-restore.log" \
    -o "-p $(port_of node1) -c synchronous_standby_names=" start >/dev/null \
    || { restore_log_tail; die "the restored node1 did not start"; }
  local deadline=$((SECONDS + 300))
  until [ "$(psql_socket "$(port_of node1)" -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; do
    # A target past the archive's end stops recovery with FATAL: the server is gone, say why at once.
    [ -n "$(postmaster_pid "$STATE/node1")" ] || { restore_log_tail; die "node1 stopped during recovery (a target beyond the archived WAL?); nothing was changed in the repository"; }
    if [ $SECONDS -ge $deadline ]; then
      as_owner "$BINDIR/pg_ctl" -D "$STATE/node1" -w -t 60 -m fast stop >/dev/null 2>&1 || true
      restore_log_tail; die "node1 did not finish recovery in 300 s"
    fi
    sleep 0.3
  done
  # pgBackRest wrote the recovery target into postgresql.auto.conf, and pg_basebackup copies that file to the
  # standbys: a standby with a recovery target promotes itself when its replay passes it (seen: node2 became a
  # second primary seconds after the restore, and writes hung waiting for a synchronous standby). Gone before
  # anything copies it.
  local setting
  for setting in restore_command recovery_target recovery_target_name recovery_target_time recovery_target_xid \
                 recovery_target_lsn recovery_target_inclusive recovery_target_action recovery_target_timeline; do
    psql_socket "$(port_of node1)" -d postgres -c "ALTER SYSTEM RESET $setting" >/dev/null \
      || die "could not reset $setting on the restored node1"
  done
  as_owner "$BINDIR/pg_ctl" -D "$STATE/node1" -w -t 60 -m fast stop >/dev/null
  say "node1 restored and promoted in $((SECONDS - started)) s; making the formation around it"
  start_monitor_and_node1
  join_standbys
  local name
  for name in $PGBOUNCERS; do start_pgbouncer "$name"; done
  wait_healthy 120
  as_owner rm -f "$STATE/restoring"
  say "restored to $what in $((SECONDS - started)) s; take a full backup of the new timeline (scripts/cluster.sh backup full)"
  # shellcheck disable=SC2086
  app_url $NODES
}

# The disaster the repository is for: every node's processes killed and its data folder deleted (the monitor and
# PgBouncers are stopped too). Only the repository, the ports and the logins remain: `restore --latest` next.
destroy_nodes() {
  local name
  for name in $PGBOUNCERS; do pid=$(pgbouncer_pid "$name"); [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  for name in $NODES; do kill_node "$name"; as_owner rm -rf "$STATE/$name"; done
  pid=$(keeper_pid monitor); [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  stop_all quiet
  say "every node killed and its data folder deleted; the repository $BACKREST/repo remains"
}

# --- commands --------------------------------------------------------------------------------------------
locate_state
SOCK=$(socket_dir)
cmd=${1:-start}
need_cluster() { [ -f "$STATE/created" ] || die "no cluster in $STATE; run scripts/cluster.sh start"; }
node_arg() { [ -n "${1:-}" ] || die "usage: scripts/cluster.sh $cmd PORT"; need_cluster; node_of_port "$1"; }

case "$cmd" in
  install) install_packages ;;
  start) start_cluster ;;
  # shellcheck disable=SC2086
  url) need_cluster; app_url $NODES ;;
  state-dir) echo "$STATE" ;;
  pgbouncer-url)
    need_cluster
    for name in $PGBOUNCERS; do
      [ -n "$(pgbouncer_pid "$name")" ] || die "the PgBouncers are not running; run scripts/cluster.sh start"
    done
    # shellcheck disable=SC2086
    app_url $PGBOUNCERS ;;
  status)
    need_cluster
    [ -n "$(keeper_pid monitor)" ] || { say "the monitor is not running"; exit 1; }
    autoctl show state --monitor "$(monitor_url)" 2>/dev/null | awk -F'|' '
      NR > 2 && NF >= 7 { gsub(/ /, "", $1); gsub(/ /, "", $3); gsub(/ /, "", $6); gsub(/ /, "", $7)
                          printf "%s %s %s (assigned %s)\n", $1, $3, $6, $7 }'
    for name in $PGBOUNCERS; do
      [ -n "$(pgbouncer_pid "$name")" ] && echo "$name 127.0.0.1:$(port_of "$name") -> node${name#pgbouncer}"
    done
    healthy || { say "not healthy (no primary with both secondaries in sync)"; exit 1; } ;;
  primary-port) need_cluster; port_in_state primary wait_primary single || die "no primary right now" ;;
  secondary-port) need_cluster; port_in_state secondary || die "no secondary right now" ;;
  node-pids) name=$(node_arg "${2:-}"); node_pids "$name" ;;
  kill-node) name=$(node_arg "${2:-}"); kill_node "$name" ;;
  hang-node) name=$(node_arg "${2:-}"); hang_node "$name" ;;
  resume-node) name=$(node_arg "${2:-}"); resume_node "$name" ;;
  restart-node) name=$(node_arg "${2:-}"); restart_node "$name" ;;
  pgbouncer-restart)
    # With `defaults`: PgBouncer's own server_connect_timeout and query_wait_timeout (server_login_retry is required).
    case "${2:-}" in ""|defaults) ;; *) die "usage: scripts/cluster.sh pgbouncer-restart [defaults]" ;; esac
    # PgBouncer caches the parameters its first server connection reported (in_hot_standby among them) and hands
    # them to every client login, so after a failover libpq's target_session_attrs=read-write believes a stale
    # answer. A fresh PgBouncer asks its node again: failover.py restarts them before each scenario.
    need_cluster
    for name in $PGBOUNCERS; do
      pid=$(pgbouncer_pid "$name")
      if [ -n "$pid" ]; then
        kill "$pid"; deadline=$((SECONDS + 10))
        while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        if alive "$pid"; then kill -KILL "$pid"; fi
      fi
      start_pgbouncer "$name" "${2:-tuned}"
    done
    # shellcheck disable=SC2086
    app_url $PGBOUNCERS ;;
  switchover) need_cluster; switchover ;;
  primaries-sync) need_cluster; primaries_sync "${2:-}" ;;
  backup) need_cluster; take_backup "${2:-incr}" ;;
  backups) need_cluster; list_backups ;;
  verify) need_cluster; verify_repository ;;
  check)
    need_cluster
    backrest_logged check check
    say "check passed: a WAL switch of the primary reached the repository" ;;
  sql)
    # As the superuser on the primary, database poopypals (a drill's "mistaken statement"); bounded.
    need_cluster; [ -n "${2:-}" ] || die "usage: scripts/cluster.sh sql 'SQL'"
    port=$(port_in_state primary wait_primary single) || die "no primary right now"
    # timeout's 124 said, not left silent (a drill's DELETE under make test's load once failed with no word).
    as_owner timeout 60 "$BINDIR/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$port" -U postgres -d poopypals -c "$2" \
      || { status=$?; [ "$status" != 124 ] || die "the statement did not end within 60 s on the primary (port $port)"; exit "$status"; } ;;
  fresh-database)
    # The app's database made again, empty, as `start` first made it (its two service roles, sql/0022, dropped with
    # it): make test starts its cluster stages from it, so that a formation kept between runs does not carry every
    # earlier run's rows (205 000 after a day of runs here, and the drills' DELETE and restores grew with them).
    need_cluster
    port=$(port_in_state primary wait_primary single) || die "no primary right now"
    roles=$(psql_socket "$port" -d poopypals -c "SELECT quote_ident(poopypals_service_role()) || ', ' || quote_ident(poopypals_profiles_role())" 2>/dev/null || true)
    as_owner timeout 60 "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$port" -U postgres -d postgres >/dev/null <<SQL || die "could not make the database poopypals again on the primary (port $port)"
DROP DATABASE IF EXISTS poopypals WITH (FORCE);
${roles:+DROP ROLE IF EXISTS $roles;}
CREATE DATABASE poopypals OWNER poopypals;
\c poopypals
GRANT EXECUTE ON FUNCTION pg_catalog.pg_create_restore_point(text) TO poopypals;
SQL
    say "the database poopypals made again, empty, on the primary (127.0.0.1:$port)${roles:+; roles $roles dropped}" ;;
  destroy) need_cluster; destroy_nodes ;;
  restore) need_cluster; shift; restore_cluster "$@" ;;
  wait-healthy) need_cluster; wait_healthy "${2:-60}"; say "healthy: primary 127.0.0.1:$(port_in_state primary), both secondaries in sync" ;;
  stop) stop_all ;;
  reset)
    stop_all quiet
    sock=$(socket_dir); case "$sock" in "$PRIVATE_PARENT"/csock-*) rm -rf "$sock" ;; esac
    rm -rf "$STATE"; say "stopped; $STATE removed" ;;
  *) die "usage: scripts/cluster.sh install|start|url|pgbouncer-url|pgbouncer-restart [defaults]|status|primary-port|secondary-port|node-pids PORT|kill-node PORT|hang-node PORT|resume-node PORT|restart-node PORT|switchover|primaries-sync|backup [full|diff|incr]|backups|verify|check|sql SQL|fresh-database|destroy|restore --to TIME|--to-name NAME|--latest|wait-healthy [SECONDS]|stop|reset" ;;
esac
