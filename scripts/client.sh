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

# Build before the server starts: the first build compiles the generator (a few minutes on 2 cores).
"$SWIFT" build --package-path clients/swift --build-tests
start_live_server "$url" "$bin"
say "the generated client against $api"
POOPYPALS_API_URL=$api POOPYPALS_API_TOKEN=$token "$SWIFT" test --package-path clients/swift --skip-build \
  --disable-xctest
