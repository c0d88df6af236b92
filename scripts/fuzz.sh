#!/usr/bin/env bash
# `make test`'s fuzzing step: schemathesis (property-based tests generated from openapi.yaml) against a live
# `poopypals serve` on a database of its own, with a registered device and a valid token, every check on,
# bounded in examples and time, with a fixed seed (a failure reproduces). Fails on any failure, not only 5xx.
#
# usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY
# FUZZ_MAX_EXAMPLES (default 30 per operation and phase), FUZZ_MAX_TIME (default 240 s), FUZZ_SEED (default 1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
url=${1:?usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY}
bin=${2:?usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY}
venv=.venv-st
version=4.32.5

say() { echo "fuzz: $*" >&2; }
command -v psql >/dev/null || { say "NOT RUN: psql is needed to create the fuzzing database"; exit 0; }
if [ ! -x "$venv/bin/st" ] || [ "$("$venv/bin/st" --version 2>/dev/null)" != "st, version $version" ]; then
  say "installing schemathesis $version into $venv (PyPI)"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "schemathesis==$version" >&2
fi

db=poopypals_fuzz_$$
base_url=${url%/*}
case "$url" in *\?*) say "NOT RUN: DATABASE_URL with query parameters is not supported here"; exit 0 ;; esac
psql "$url" -X -q -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
fuzz_url=$base_url/$db
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  psql "$url" -X -q -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$bin" migrate --database-url "$fuzz_url" >/dev/null 2>&1

export AUTH_JWT_SECRET
AUTH_JWT_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
out=$(mktemp)
"$bin" serve --port 0 --metrics-port 0 --database-url "$fuzz_url" >"$out" 2>/dev/null &
server=$!
port=
for _ in $(seq 1 200); do
  port=$(sed -n 's#^listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$out")
  [ -n "$port" ] && break
  sleep 0.1
done
rm -f "$out"
[ -n "$port" ] || { say "the server did not start"; exit 1; }
api=http://127.0.0.1:$port
device=$(python3 -c 'import uuid; print(uuid.uuid4())')
token=$("$bin" dev-token --email fuzz@example.com)
curl -sf -o /dev/null -X PUT "$api/v1/device" -H "X-Device-ID: $device" -H 'Content-Type: application/json' -d '{}'
curl -sf -o /dev/null -X PUT "$api/v1/profile" -H "X-Device-ID: $device" -H "Authorization: Bearer $token"

say "schemathesis against $api (seed ${FUZZ_SEED:-1}, at most ${FUZZ_MAX_EXAMPLES:-30} examples, ${FUZZ_MAX_TIME:-240} s)"
"$venv/bin/st" run openapi.yaml --url "$api" \
  -H "X-Device-ID: $device" -H "Authorization: Bearer $token" \
  --checks all --max-examples "${FUZZ_MAX_EXAMPLES:-30}" --max-time "${FUZZ_MAX_TIME:-240}" \
  --seed "${FUZZ_SEED:-1}" --workers 2 --request-timeout 20 --output-truncate true
