#!/usr/bin/env bash
# `make bench`: the throw-away PostgreSQL, release builds, then poopypals-bench (data layer vs pgbench on the same
# SQL, scaling, HTTP with wrk, reads on the local cluster's standby). Extra arguments go to poopypals-bench (for
# example --ten-million, --read-scale-only or --instructions-only).
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
if command -v pg_autoctl >/dev/null || [ -x /usr/lib/postgresql/15/bin/pg_autoctl ]; then
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
stop_cluster() { [ -z "$started_cluster" ] || scripts/cluster.sh stop >&2 || true; }
trap stop_cluster EXIT
"$bench_bin/poopypals-bench" --server-binary "$bin/poopypals" --readme bench/README.md "${cluster_args[@]}" "$@"
