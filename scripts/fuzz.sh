#!/usr/bin/env bash
# `make test`'s fuzzing step: schemathesis (property-based tests generated from openapi.yaml) against a live
# `poopypals serve` on a database of its own, with a registered device and a valid token, every check on,
# bounded in examples and time, with a fixed seed (a failure reproduces). Fails on any failure, not only 5xx,
# and on any warning (schemathesis.toml): one says the spec and the server disagree, or the run missed the logic.
#
# usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY
# FUZZ_MAX_EXAMPLES (default 30 per operation and phase), FUZZ_SEED (default 1), FUZZ_MAX_TIME: a time budget in
# seconds (default none: one pass of every phase). With a budget schemathesis repeats its phases, and reruns the
# coverage phase of an operation whose refusals taught it something, until the budget is spent: deeper, but where
# the budget cuts a pass decides what the warnings see (a rerun of POST /v1/sync's coverage cut short, every
# schema-valid case in it refused, warned "validation mismatch" once in 120 s). `make test` runs one pass, the same
# cases every run; `make fuzz` the long campaign.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
url=${1:?usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY}
bin=${2:?usage: scripts/fuzz.sh DATABASE_URL POOPYPALS_BINARY}
venv=.venv-st
version=4.32.5

say() { echo "fuzz: $*" >&2; }
. scripts/lib/live-server.sh
prometheus_client=0.26.0
if [ ! -x "$venv/bin/st" ] || [ "$("$venv/bin/st" --version 2>/dev/null)" != "st, version $version" ] \
   || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("prometheus-client"))' 2>/dev/null)" != "$prometheus_client" ]; then
  say "installing schemathesis $version and prometheus-client $prometheus_client into $venv (PyPI)"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "schemathesis==$version" "prometheus-client==$prometheus_client" >&2
fi

start_live_server "$url" "$bin"
device=$(python3 -c 'import uuid; print(uuid.uuid4())')
curl -sf -o /dev/null -X PUT "$api/v1/device" -H "X-Device-ID: $device" -H 'Content-Type: application/json' -d '{}'
curl -sf -o /dev/null -X PUT "$api/v1/profile" -H "X-Device-ID: $device" -H "Authorization: Bearer $token"

budget=${FUZZ_MAX_TIME:+a budget of $FUZZ_MAX_TIME s}; budget=${budget:-one pass}
say "schemathesis against $api (seed ${FUZZ_SEED:-1}, at most ${FUZZ_MAX_EXAMPLES:-30} examples, $budget)"
# scripts/fuzz_hooks.py keeps the run on the server's logic: timestamps inside the clock's windows, a device of
# their own for rotation and erasure, a log under every well-formed log id, and the run's device wherever a case
# sends a well-formed X-Device-ID.
# The token goes in as the spec's bearerAuth scheme (schemathesis.toml), not with -H, which would also fill it in
# where a case leaves it out on purpose.
export FUZZ_API=$api FUZZ_DEVICE=$device FUZZ_TOKEN=$token SCHEMATHESIS_HOOKS=fuzz_hooks PYTHONPATH=scripts
"$venv/bin/st" run openapi.yaml --url "$api" \
  --checks all --max-examples "${FUZZ_MAX_EXAMPLES:-30}" ${FUZZ_MAX_TIME:+--max-time "$FUZZ_MAX_TIME"} \
  --seed "${FUZZ_SEED:-1}" --workers 2 --request-timeout 20 --output-truncate true

# After thousands of requests, most refused: /metrics as Prometheus's own parser reads it.
curl -sf "$metrics" -o "$venv/metrics.txt"
"$venv/bin/python" scripts/check_metrics.py "$venv/metrics.txt"
