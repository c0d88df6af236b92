#!/usr/bin/env bash
# `make bench`: the throw-away PostgreSQL, release builds, then poopypals-bench (data layer vs pgbench on the same
# SQL, scaling, HTTP with wrk). Extra arguments go to poopypals-bench (for example --ten-million).
set -euo pipefail
cd "$(dirname "$0")/.."
swift=${SWIFT:-swift}
command -v pgbench >/dev/null || { echo "bench: pgbench is needed (Debian: apt-get install postgresql-contrib)" >&2; exit 1; }
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench: installing wrk" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
  else
    echo "bench: wrk is needed for the HTTP runs (Debian: apt-get install wrk)" >&2; exit 1
  fi
fi
url=$(scripts/db.sh start)
export DATABASE_URL=$url
"$swift" build -c release --product poopypals
# The benchmark is a package of its own (bench/Package.swift): its dependencies stay out of the service's build.
"$swift" build -c release --package-path bench --product poopypals-bench
bin=$("$swift" build -c release --show-bin-path)
bench_bin=$("$swift" build -c release --package-path bench --show-bin-path)
exec "$bench_bin/poopypals-bench" --server-binary "$bin/poopypals" --readme bench/README.md "$@"
