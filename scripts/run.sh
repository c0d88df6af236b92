#!/usr/bin/env bash
# `make run`: PostgreSQL (throw-away unless DATABASE_URL is set), migrations, then the API in dev mode,
# with curl commands that work as printed.
set -euo pipefail
bin=${1:?usage: scripts/run.sh PATH_TO_POOPYPALS}
cd "$(dirname "$0")/.."
url=$(scripts/db.sh start)
export DATABASE_URL=$url
"$bin" migrate
port=${PORT:-8080}
metrics_port=${POOPYPALS_METRICS_PORT:-9464}
device=$(cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr 'A-Z' 'a-z')
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
base="http://127.0.0.1:$port"
cat <<TXT

PoopyPals API on $base (dev mode: a JWT secret is generated into .dev/jwt-secret). In another terminal:

  curl -s -X PUT $base/v1/device -H 'X-Device-ID: $device' -H 'Content-Type: application/json' -d '{"model":"iPhone15,2","osVersion":"18.1"}'
  curl -s -X POST $base/v1/logs -H 'X-Device-ID: $device' -H 'Content-Type: application/json' -d '{"occurredAt":"$now","bristolType":4,"notes":"after coffee"}'
  curl -s $base/v1/logs -H 'X-Device-ID: $device'
  curl -s -X PUT $base/v1/profile -H 'X-Device-ID: $device' -H "Authorization: Bearer \$($bin dev-token --email you@example.com)"
  curl -s $base/healthz; curl -s $base/readyz; curl -s http://127.0.0.1:$metrics_port/metrics | head

Stop with Ctrl-C.
TXT
exec "$bin" serve --dev --port "$port" --metrics-port "$metrics_port"
