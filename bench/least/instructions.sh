#!/usr/bin/env bash
# PostgreSQL's instructions per transaction for bench/least/run.sh's transactions (issue 57): counted, not timed,
# so they compare across runs where its CPU times scatter by 30 %. The same database and statements as run.sh
# (run with LEAST_SCRIPTS_ONLY: it sets them up and stops), on a throw-away PostgreSQL 15 cluster of their own, then
# that server restarted under valgrind's callgrind (every backend counted). Each transaction: pgbench -M prepared,
# one client, 5 transactions to warm up (the first backend after a change of the schema rebuilds the relation
# cache's init file), then the backend's instructions for 250 transactions less those for 50, divided by 200. The
# database grows as it runs: repeated counts drift by 1-2 %.
#
#   bench/least/instructions.sh [BINARY] [NAME...]     (NAME: a script of run.sh, e.g. get_4_ours; default: the
#                                                       get, list, create and patch shapes)
# About 1 minute a transaction on 2 cores. Needs valgrind (installed from Debian when missing).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/.build/debug/poopypals}
shift || true
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(get_2_least get_4_ours list_2_least list_4_ours create_2_least create_4_numbered create_5_ours
  patch_4_numbered patch_5_ours)
cd "$ROOT"
command -v valgrind >/dev/null || { apt-get install -y -qq valgrind >/dev/null 2>&1 || true; }
command -v valgrind >/dev/null || { echo "least: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
export POOPYPALS_PG_DIR=/tmp/poopypals-least-instructions-$$ POOPYPALS_PG_PORT=${LEAST_PORT:-55997}
unset DATABASE_URL
OUT=$(mktemp -d)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill -INT "$PID" 2>/dev/null || true; for _ in $(seq 120); do kill -0 "$PID" 2>/dev/null || break; sleep 1; done; fi
  scripts/db.sh stop >/dev/null 2>&1 || true
  rm -rf "$OUT" "$POOPYPALS_PG_DIR"
}
trap cleanup EXIT
LEAST_SCRIPTS_ONLY=$OUT bench/least/run.sh "$BIN" >/dev/null
CU=$(cat "$OUT/url")
SU=$(scripts/db.sh superuser-url)
DATA=$(psql "$SU" -AtX -c "SHOW data_directory")
BINDIR=$(scripts/db.sh bindir)
OWNER=$(stat -c %U "$DATA")
scripts/db.sh stop >/dev/null
COUNTS=$POOPYPALS_PG_DIR/callgrind
mkdir -p "$COUNTS"; chown "$OWNER" "$COUNTS"
runuser -u "$OWNER" -- valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$COUNTS/cg.%p" \
  "$BINDIR/postgres" -D "$DATA" >"$COUNTS/valgrind.log" 2>&1 &
PID=$!
for _ in $(seq 180); do psql "$CU" -AtX -c "SELECT 1" >/dev/null 2>&1 && break; sleep 1; done
psql "$CU" -AtX -c "SELECT 1" >/dev/null || { tail -5 "$COUNTS/valgrind.log" >&2; exit 1; }

count() {  # SCRIPT N: the instructions of the backend that ran N transactions of SCRIPT
  local mark=$COUNTS/mark best=0 total
  touch "$mark"; sleep 0.1
  pgbench -n -M prepared -c 1 -t "$2" -f "$OUT/$1.sql" "$CU" >"$COUNTS/pgbench.log" 2>&1 || { tail -3 "$COUNTS/pgbench.log" >&2; return 1; }
  sleep 1.5  # a backend writes its counts when it exits
  for f in $(find "$COUNTS" -newer "$mark" -name 'cg.*'); do
    grep -q PortalRun "$f" || continue  # a client backend, not autovacuum or the checkpointer
    total=$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')
    [ "${total:-0}" -gt "$best" ] && best=$total
  done
  find "$COUNTS" -name 'cg.*' -newer "$mark" -delete
  echo "$best"
}
echo "| transaction | shape | PostgreSQL instructions per transaction |"
echo "|---|---|---|"
for name in "${NAMES[@]}"; do
  [ -f "$OUT/$name.sql" ] || { echo "least: no script $name (see bench/least/run.sh)" >&2; exit 1; }
  count "$name" 5 >/dev/null
  few=$(count "$name" 50); many=$(count "$name" 250)
  printf '| %s | %s | %.1f k |\n' "${name%%_*}" "${name#*_?_}" "$(python3 -c "print(($many - $few) / 200 / 1000)")"
done
