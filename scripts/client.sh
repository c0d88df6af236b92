#!/usr/bin/env bash
# `make test`'s client step: the Swift client generated from openapi.yaml by swift-openapi-generator
# (clients/swift, a package of its own, so the service's build never compiles the generator) calls every route
# of a live `poopypals serve` with its default configuration.
#
# usage: scripts/client.sh DATABASE_URL POOPYPALS_BINARY
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
url=${1:?usage: scripts/client.sh DATABASE_URL POOPYPALS_BINARY}
bin=${2:?usage: scripts/client.sh DATABASE_URL POOPYPALS_BINARY}
SWIFT=${SWIFT:-swift}
say() { echo "client: $*" >&2; }
. scripts/lib/live-server.sh

# The package's build lives in a cache of the machine's, not in the checkout (POOPYPALS_CLIENT_BUILD chooses another
# folder): a fresh clone, as CI's every run, compiled swift-openapi-generator and its dependencies again, 160 s of
# the two cores alone and most of CI's 412 s million-log stage, beside which it runs (CI of stop 60). With the cache a
# new checkout recompiles its own targets only (33 s). One checkout at a time uses it (a lock, waited for 15 min).
if [ -n "${POOPYPALS_CLIENT_BUILD:-}" ]; then scratch=$POOPYPALS_CLIENT_BUILD
elif [ "$(id -u)" = 0 ]; then scratch=/var/cache/poopypals/client-build
else scratch=${XDG_CACHE_HOME:-$HOME/.cache}/poopypals/client-build; fi
mkdir -p "$(dirname "$scratch")"
exec 9>"$scratch.lock"
locked=0; flock -w 900 9 || locked=$?
[ "$locked" != 1 ] || { say "another checkout's client build has held $scratch for 15 minutes"; exit 1; }
[ "$locked" = 0 ] || { say "flock on $scratch.lock failed (exit $locked)"; exit 1; }
# Build before the server starts: the first build compiles the generator (a few minutes on 2 cores).
"$SWIFT" build --package-path clients/swift --scratch-path "$scratch" --build-tests
# Without the lock's descriptor (9>&-): a server that outlived this script would hold the lock for every later run.
start_live_server "$url" "$bin" 9>&-
say "the generated client against $api"
POOPYPALS_API_URL=$api POOPYPALS_API_TOKEN=$token "$SWIFT" test --package-path clients/swift --scratch-path "$scratch" \
  --skip-build --disable-xctest
