#!/usr/bin/env bash
# `make run`: PostgreSQL (throw-away unless DATABASE_URL is set), migrations, then the API in dev mode,
# with curl commands that work as printed.
set -euo pipefail
bin=${1:?usage: scripts/run.sh PATH_TO_POOPYPALS}
cd "$(dirname "$0")/.."
say() { echo "run: $*" >&2; }
die() { echo "run: error: $*" >&2; exit 1; }
. scripts/lib/common.sh
url=$(scripts/db.sh start)
export DATABASE_URL=$url
"$bin" migrate
# A port nobody listens on: the one asked for (PORT, POOPYPALS_METRICS_PORT), else the first free one from the
# default up. A busy port that was asked for is named with the fix, rather than failing with a bind error later.
choose_port() {  # $1 variable name, $2 requested value or empty, $3 default
  if [ -n "$2" ] && [ "$2" != 0 ]; then
    if port_in_use "$2"; then
      echo "run: port $2 ($1) is in use; choose another, e.g. $1=$(first_free_port $(( $2 + 1 ))) make run, or unset $1 to pick a free one" >&2
      exit 2
    fi
    echo "$2"
  else
    first_free_port "$3"
  fi
}
port=$(choose_port PORT "${PORT:-}" 8080)
metrics_port=$(choose_port POOPYPALS_METRICS_PORT "${POOPYPALS_METRICS_PORT:-}" 9464)
[ "$metrics_port" = "$port" ] && metrics_port=$(first_free_port $((port + 1)))
root=$(pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
device=$(cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr 'A-Z' 'a-z')
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
base="http://127.0.0.1:$port"
cat <<TXT

PoopyPals API on $base (dev mode: a JWT secret is generated into ~/.local/state/poopypals/jwt-secret). In another terminal:

  curl -s -X PUT $base/v1/device -H 'X-Device-ID: $device' -H 'Content-Type: application/json' -d '{"model":"iPhone15,2","osVersion":"18.1"}'
  curl -s -X POST $base/v1/logs -H 'X-Device-ID: $device' -H 'Content-Type: application/json' -d '{"occurredAt":"$now","bristolType":4,"notes":"after coffee"}'
  curl -s $base/v1/logs -H 'X-Device-ID: $device'
  curl -s -X PUT $base/v1/profile -H 'X-Device-ID: $device' -H "Authorization: Bearer \$(cd $root && $bin dev-token --email you@example.com)"
  curl -s $base/healthz; curl -s $base/readyz; curl -s http://127.0.0.1:$metrics_port/metrics | head

Stop with Ctrl-C.
TXT
exec "$bin" serve --dev --port "$port" --metrics-port "$metrics_port"
