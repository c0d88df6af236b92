#!/usr/bin/env bash
# `make bench`: the throw-away PostgreSQL, release builds, then poopypals-bench (data layer vs pgbench on the same
# SQL, scaling, HTTP with wrk, reads on the local cluster's standby, the scenarios on Citus beside the plain server).
# Extra arguments go to poopypals-bench (for example --ten-million, --read-scale-only, --instructions-only or
# --citus-only).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "bench: $*" >&2; }
die() { echo "bench: error: $*" >&2; exit 1; }
. scripts/lib/common.sh
swift=${SWIFT:-swift}
command -v pgbench >/dev/null || die "pgbench is needed (Debian: apt-get install postgresql-contrib)"
command -v wrk >/dev/null || apt_install wrk
# Server instructions per request are counted under callgrind (no hardware counters in a VM).
command -v valgrind >/dev/null || apt_install valgrind
command -v objcopy >/dev/null || apt_install binutils
command -v cc >/dev/null || apt_install gcc
url=$(scripts/db.sh start)
export DATABASE_URL=$url
"$swift" build -c release --product poopypals
# The benchmark is a package of its own (bench/Package.swift): its dependencies stay out of the service's build.
"$swift" build -c release --package-path bench --product poopypals-bench
bin=$("$swift" build -c release --show-bin-path)
bench_bin=$("$swift" build -c release --package-path bench --show-bin-path)

# The read-scale runs use the local cluster (scripts/cluster.sh): started here when its packages are there (and
# stopped again at the end when this script started it); skipped otherwise, with the command that installs them.
cluster_args=()
started_cluster=
# The runs that use nothing of the cluster (a part of the bench alone) do not start it.
only_part=
case " $* " in *" --citus-only "* | *" --floor-only "* | *" --instructions-only "*) only_part=1 ;; esac
if [ -n "$only_part" ]; then
  :
elif command -v pg_autoctl >/dev/null || [ -x /usr/lib/postgresql/15/bin/pg_autoctl ]; then
  scripts/cluster.sh status >/dev/null 2>&1 || started_cluster=1
  scripts/cluster.sh start >&2
  scripts/cluster.sh wait-healthy 90 >&2
  cluster_url=$(scripts/cluster.sh url)
  secondary=$(scripts/cluster.sh secondary-port)
  "$bin/poopypals" migrate --database-url "$cluster_url" >&2
  # The standby alone: the same credentials, its host and port, no target_session_attrs.
  standby_url=$(printf '%s' "$cluster_url" | sed -E "s#@[^/]*/#@127.0.0.1:$secondary/#; s#\?.*##")
  cluster_args=(--cluster-url "$cluster_url" --standby-url "$standby_url")
else
  echo "bench: read-scale runs skipped: the cluster's packages are missing (scripts/cluster.sh install)" >&2
fi

# The Citus row (issue 45): the scenarios on a database of the local Citus cluster (scripts/citus.sh) that
# `poopypals migrate` distributes by device, beside the plain server. Skipped, saying why, where Citus cannot be
# built or found (scripts/citus.sh install exits 3 then).
citus_args=()
started_citus=
citus_database=poopypals_bench_citus
citus_install=0
case " $* " in *" --floor-only "* | *" --instructions-only "* | *" --read-scale-only "*) citus_install=skip ;; esac
[ "$citus_install" = skip ] || scripts/citus.sh install >&2 || citus_install=$?
if [ "$citus_install" = skip ]; then
  :
elif [ "$citus_install" = 0 ]; then
  # Captured first: under pipefail, `grep -q` quitting at its match fails the pipeline (status gets SIGPIPE).
  citus_status=$(scripts/citus.sh status 2>&1 || true)
  grep -q "coordinator: running" <<<"$citus_status" || started_citus=1
  scripts/citus.sh start >/dev/null
  scripts/citus.sh dropdb "$citus_database"
  citus_args=(--citus-url "$(scripts/citus.sh createdb "$citus_database")")
elif [ "$citus_install" = 3 ]; then
  echo "bench: the Citus row skipped (scripts/citus.sh install said why above)" >&2
else
  die "scripts/citus.sh install exited $citus_install"
fi
finish() {
  if [ ${#citus_args[@]} -gt 0 ]; then scripts/citus.sh dropdb "$citus_database" >&2 || true; fi
  [ -z "$started_citus" ] || scripts/citus.sh stop >&2 || true
  [ -z "$started_cluster" ] || scripts/cluster.sh stop >&2 || true
}
trap finish EXIT
"$bench_bin/poopypals-bench" --server-binary "$bin/poopypals" --readme bench/README.md "${cluster_args[@]}" "${citus_args[@]}" "$@"
