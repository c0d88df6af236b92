#!/usr/bin/env bash
# `make test`: every test on each PostgreSQL major version we support, each with PgBouncer (transaction pooling)
# in front: the system's server (15 on Debian 12) in .pg/, and 18 from PyPI (`scripts/db.sh pg18-bindir`) in
# .pg18/ (both under /tmp when the `postgres` user cannot enter the checkout). Builds once, then runs the suite
# once per server, with a header before each; fails if any run fails. Each run gets, from scripts/db.sh, the
# server's URL, its PgBouncer, its superuser socket and its binaries' folder (POOPYPALS_TEST_PG_BINDIR, where the
# tests find pg_dump): the tests never guess where a cluster lives.
#
# With DATABASE_URL set, runs once against it, with PGBOUNCER_URL, POOPYPALS_TEST_SUPERUSER_URL and
# POOPYPALS_TEST_PG_BINDIR if set.
# POOPYPALS_TEST_SKIP names stages not to run, said as NOT RUN: `distributed` (the device's suites on the
# distributed schema), `load`, `large` (the device with a million logs), `previous` (the previous release beside
# this one): for a partial run by hand; make test and .ci/run skip nothing.
# SWIFT chooses the swift command (default `swift`).
# `scripts/test.sh --quick` (`make check`): the quick check for every commit: the build and the first server's
# suite (unit, integration, CLI and HTTP tests on PostgreSQL 15), nothing else; `make test` stays the gate.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-swift}
# At most 8 tests at once in a test process (Swift Testing's own limit, experimental in 6.3: without it every test
# of the suite starts at once). Measured on this machine, the PostgreSQL 15 suite with a login timed every 0.2 s
# beside it: unlimited, 136 s and logins of up to 10 s (28 over 1 s); 8 at once, 127–150 s and logins of 1.5 s at
# most (7 over 1 s). CI of stop 64 failed four tests, each at a login that took more than 30 s.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-8}
quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

# "15", "18", or empty when psql is missing or the server does not answer.
major_version() {
  command -v psql >/dev/null || return 0
  local num; num=$(psql "$1" -X -A -t -c 'SHOW server_version_num' 2>/dev/null) || return 0
  [ -n "$num" ] && echo $((num / 10000))
  return 0
}

labels=() urls=() bouncers=() superusers=() bindirs=() bouncer_logs=() bouncer_log_lines=() server_logs=() server_log_lines=()
# Each stage's output is kept, so that the end of the run can repeat which tests failed and why: a long run's
# last screen is what a reader (and CI's summary) sees.
logs=$(mktemp -d)
# The stages run in the background (beside another) do not outlive the run.
# (`|| true`: under set -e a failing command in the trap would become the run's exit status.)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT
failed=() failed_logs=()
fail() { failed+=("$1"); [ -z "${2:-}" ] || failed_logs+=("$2"); }  # STAGE [ITS LOG]
# A PgBouncer's log and its length now (a PgBouncer left running keeps its log): summed up from there if a stage fails.
# (A server's log the same, for its FATAL, PANIC and WARNING messages.)
remember_log() {  # LOGS LINES LOG: appends LOG and its length now to the arrays named LOGS and LINES
  local -n into_logs=$1 into_lines=$2
  into_logs+=("$3"); into_lines+=("$(wc -l 2>/dev/null <"$3" || echo 0)")
}
remember_bouncer_log() { remember_log bouncer_logs bouncer_log_lines "$1"; }  # LOG
remember_server_log() { remember_log server_logs server_log_lines "$1"; }  # LOG
# True, having said so at the end of LOG, when LOG shows no passing test run: a filter that matches nothing passes.
ran_no_test() {  # LOG WHAT
  ! grep -qE "Test run with [1-9][0-9]* tests? .*passed" "$1" || return 1
  echo "test: $2 ran no test" | tee -a "$1" >&2
}
skipped() {  # STAGE WHAT: true, having said so, when POOPYPALS_TEST_SKIP names STAGE
  [[ " ${POOPYPALS_TEST_SKIP:-} " == *" $1 "* ]] || return 1
  echo "test: NOT RUN: $2 (POOPYPALS_TEST_SKIP=${POOPYPALS_TEST_SKIP})" >&2
}
# How long a login to a server takes while a stage uses it: one every half second, in the background, each line
# "HH:MM:SS milliseconds" ("failed" when it failed). Every failure CI has shown since stop 63 was a login that took
# more than a test's bound (6 s, 15 s, 30 s); the summary below says how slow logins were, and when.
prober=
probe_logins() {  # URL LOG: the prober's PID in $prober (none without psql); a job of this shell, so the EXIT trap ends it
  prober=
  command -v psql >/dev/null || return 0
  # (Each wait on a child of its own: a signal ends `wait` at once, where a login in the foreground would hold the
  # trap for up to its 120 s.)
  ( child=
    trap 'kill $child 2>/dev/null; exit 0' TERM
    while :; do
      started=$(date +%s%N)
      PGCONNECT_TIMEOUT=120 psql "$1" -X -A -t -c 'SELECT 1' >/dev/null 2>&1 & child=$!
      if wait "$child"; then
        echo "$(date +%T) $(( ($(date +%s%N) - started) / 1000000 ))"
      else
        echo "$(date +%T) failed"
      fi
      sleep 0.5 & child=$!; wait "$child"
    done ) >"$2" 2>/dev/null &
  prober=$!
}
login_lines=()
logins_said() {  # LOG WHAT: one line on the logins the prober timed, kept for the end of the run too
  [ -s "$1" ] || return 0
  local line
  line=$(awk -v what="$2" '$2 == "failed" { failed++; next }
    { n++; if ($2 + 0 > max) { max = $2 + 0; at = $1 } if ($2 + 0 > 5000) slow++ }
    END { printf "test: logins to %s: %d timed, the slowest %d ms (at %s), %d over 5 s, %d failed", what, n, max, at, slow + 0, failed + 0 }' "$1")
  login_lines+=("$line")
  echo "$line" >&2
}
# Each stage's time, printed at the end (issue 56: growth is seen when it happens). A stage runs from its header to
# the next one; "set-up" is everything before the first (installs, servers, the build).
stage_names=() stage_seconds=() stage_current="set-up (servers, Citus, the build)" stage_started=$SECONDS
stage_header() {  # TITLE: ends the running stage, prints TITLE as the next one's header
  stage_names+=("$stage_current") stage_seconds+=($((SECONDS - stage_started)))
  stage_current=$1 stage_started=$SECONDS
  echo "== $1 =="
}
stage_times() {
  stage_names+=("$stage_current") stage_seconds+=($((SECONDS - stage_started)))
  echo "test: time per stage (s):" >&2
  local i
  for i in "${!stage_names[@]}"; do printf 'test: %6d  %s\n' "${stage_seconds[$i]}" "${stage_names[$i]}" >&2; done
  printf 'test: %6d  in all\n' "$SECONDS" >&2
  for i in "${!beside_names[@]}"; do printf 'test: %6d  %s (not in the sum)\n' "${beside_seconds[$i]}" "${beside_names[$i]}" >&2; done
}
beside_names=() beside_seconds=()  # stages run in the background, beside others: their own time
# Whether scripts/cluster.sh can run here: pg_auto_failover installed, or installable (root).
cluster_possible() { command -v pg_autoctl >/dev/null || [ "$(id -u)" = 0 ]; }
citus_said=$logs/citus-script.log
if [ -n "${DATABASE_URL:-}" ]; then
  # An external server: no local binaries needed. What needs more than DATABASE_URL is said, not skipped silently.
  [ -n "${PGBOUNCER_URL:-}" ] || echo "test: NOT RUN: the tests through PgBouncer (set PGBOUNCER_URL to a PgBouncer in transaction mode in front of this server)" >&2
  [ -n "${POOPYPALS_TEST_SUPERUSER_URL:-}" ] || echo "test: NOT RUN: the tests that need a superuser login (audit of a superuser, pg_dump of the data; set POOPYPALS_TEST_SUPERUSER_URL)" >&2
  version=$(major_version "$DATABASE_URL")
  labels+=("PostgreSQL ${version:-?} (DATABASE_URL)") urls+=("$DATABASE_URL") bouncers+=("${PGBOUNCER_URL:-}")
  superusers+=("${POOPYPALS_TEST_SUPERUSER_URL:-}") bindirs+=("${POOPYPALS_TEST_PG_BINDIR:-}")
else
  # Citus for the Citus stage below, first: building it installs postgresql-server-dev, which upgrades PostgreSQL 15's
  # minor under any server of it that runs. Exit 3 is "cannot here" (said why), not a failure.
  citus_install=0
  $quick || scripts/citus.sh install 2> >(tee "$citus_said" >&2) || citus_install=$?
  # The cluster's packages (pg_auto_failover, pgBackRest, PgBouncer) here too, before any server starts: the restore
  # drills begin in the background beside the Citus stages, and an install there would run under the tests.
  if ! $quick && cluster_possible; then
    scripts/cluster.sh install || echo "test: scripts/cluster.sh install failed (the cluster stages say what follows)" >&2
  fi
  url=$(scripts/db.sh start); bouncer=$(scripts/db.sh pgbouncer)
  system_version=$(major_version "$url")
  labels+=("PostgreSQL ${system_version:-?}") urls+=("$url") bouncers+=("$bouncer")
  superusers+=("$(scripts/db.sh superuser-url)") bindirs+=("$(scripts/db.sh bindir)")
  remember_bouncer_log "$(scripts/db.sh pgbouncer-log)"; remember_server_log "$(scripts/db.sh server-log)"
  if $quick; then
    :
  elif [ "$system_version" = 18 ]; then
    echo "test: the system PostgreSQL is already 18; no second cluster" >&2
  else
    url=$(POOPYPALS_PG_VERSION=18 scripts/db.sh start); bouncer=$(POOPYPALS_PG_VERSION=18 scripts/db.sh pgbouncer)
    labels+=("PostgreSQL 18") urls+=("$url") bouncers+=("$bouncer")
    superusers+=("$(POOPYPALS_PG_VERSION=18 scripts/db.sh superuser-url)")
    bindirs+=("$(POOPYPALS_PG_VERSION=18 scripts/db.sh bindir)")
    remember_bouncer_log "$(POOPYPALS_PG_VERSION=18 scripts/db.sh pgbouncer-log)"
    remember_server_log "$(POOPYPALS_PG_VERSION=18 scripts/db.sh server-log)"
  fi
fi

"$SWIFT" build --build-tests
if ! { command -v docker >/dev/null && docker compose version >/dev/null 2>&1; } && ! command -v docker-compose >/dev/null; then
  echo "test: NOT RUN: the docker-compose.yml checks (install Docker Compose, or Debian's docker-compose)" >&2
fi

for i in "${!labels[@]}"; do
  echo
  stage_header "${labels[$i]}"
  probe_logins "${urls[$i]}" "$logs/logins-$i.log"
  if ! DATABASE_URL=${urls[$i]} PGBOUNCER_URL=${bouncers[$i]} POOPYPALS_TEST_SUPERUSER_URL=${superusers[$i]} \
       POOPYPALS_TEST_PG_BINDIR=${bindirs[$i]} "$SWIFT" test --skip-build --disable-xctest --skip LoadTests --skip LargeDeviceTests --skip CitusTests \
       2>&1 | tee "$logs/suite-$i.log"; then
    fail "${labels[$i]}" "$logs/suite-$i.log"
  fi
  [ -z "$prober" ] || { kill "$prober" 2>/dev/null; wait "$prober" 2>/dev/null || true; }
  logins_said "$logs/logins-$i.log" "${labels[$i]} during its suite"
done

if $quick; then
  echo
  stage_times
  [ ${#failed[@]} -eq 0 ] || { echo "test: FAILED on ${failed[*]} (the quick check)" >&2; exit 1; }
  echo "test: the quick check passed on ${labels[0]} (make test is the gate)"
  exit 0
fi

# docs/schema.sql, the schema as the migrations leave it, made again and compared (on PostgreSQL 15, whose pg_dump
# wrote it): a migration added without `make schema` fails here.
echo
stage_header "docs/schema.sql is what the migrations make (scripts/schema.sh check)"
if [ "$(major_version "${urls[0]}")" != 15 ]; then
  echo "test: NOT RUN: the schema file check (docs/schema.sql is PostgreSQL 15's pg_dump; ${labels[0]} here)" >&2
elif ! POOPYPALS_BINARY="$("$SWIFT" build --show-bin-path)/poopypals" scripts/schema.sh check \
     2>&1 | tee "$logs/schema.log"; then
  fail "docs/schema.sql is stale" "$logs/schema.log"
fi

# The previous release (CHANGELOG.md's second heading), built from its own commit (scripts/release.sh previous,
# cached per machine), against this release's migrations (issue 55): its own HTTP suite on a schema made by this
# release's pre-deployment migrations (its sql/ folder replaced by ours for the run, its binary and tests as built),
# then scripts/upgrade_drill.py: a rolling upgrade and a rollback under load, old and new binaries side by side,
# with no failed request and nothing acknowledged lost. A migration the previous release cannot survive fails here.
echo
stage_header "the previous release beside this one (scripts/release.sh, scripts/upgrade_drill.py; ${labels[0]})"
if skipped previous "the previous release beside this one"; then
  :
elif ! previous=$(SWIFT="$SWIFT" scripts/release.sh previous 2> >(tee "$logs/previous-build.log" >&2)); then
  fail "the previous release" "$logs/previous-build.log"
else
  previous_version=$(scripts/release.sh previous-version | cut -d' ' -f1)
  echo "test: release $previous_version's own HTTP suite on this release's pre-deployment migrations" >&2
  # Each step checked: set -e does not hold inside `if !`, and a failed cd would run this release's suite instead.
  if ! ( flock 9 || exit 1
         trap 'rm -rf "$previous/src/sql"; cp -R "$previous/sql" "$previous/src/sql"' EXIT
         rm -rf "$previous/src/sql" && mkdir "$previous/src/sql" && cp sql/*.sql "$previous/src/sql/" || exit 1
         cd "$previous/src" || exit 1
         DATABASE_URL=${urls[0]} PGBOUNCER_URL=${bouncers[0]} POOPYPALS_TEST_SUPERUSER_URL=${superusers[0]} \
           POOPYPALS_TEST_PG_BINDIR=${bindirs[0]} "$SWIFT" test --skip-build --disable-xctest --filter PoopyPalsHTTPTests \
           --skip LoadTests ) 9>"$previous.lock" 2>&1 | tee "$logs/previous-http.log"; then
    fail "release $previous_version's HTTP suite on this release's migrations" "$logs/previous-http.log"
  elif ran_no_test "$logs/previous-http.log" "release $previous_version's HTTP suite"; then
    fail "release $previous_version's HTTP suite on this release's migrations" "$logs/previous-http.log"
  fi
  if ! timeout 600 python3 scripts/upgrade_drill.py --previous-binary "$previous/src/.build/debug/poopypals" \
       --previous-migrations "$previous/sql" --binary "$("$SWIFT" build --show-bin-path)/poopypals" --migrations-dir sql \
       --database-url "${urls[0]}" 2>&1 | tee "$logs/upgrade.log"; then
    fail "rolling upgrade and rollback from release $previous_version" "$logs/upgrade.log"
  fi
fi

# The suites that run again on the distributed schema (below): a test's own database there costs a few seconds.
# (KeptDeviceIDTests and RoundTripTests since issue 59: a kept id's check travels in the context statement, which
# on Citus the coordinator runs before the statements that carry the context to the workers; a check that failed
# there would cost every request a retry, seen only as a round trip more.)
distributed_suites='DeviceIsolationTests|DeviceAndLogRepositoryTests|UserRepositoryTests|SyncRepositoryTests|DeviceKeyMapTests|KeyChangeRaceTests|KeptDeviceIDTests|RoundTripTests|PoopyPalsHTTPTests.SyncTests|PoopyPalsHTTPTests.QuotaTests|PoopyPalsHTTPTests.RouteTests'

# Citus (issue 45): a coordinator and two workers (scripts/citus.sh), and what they carry to the workers of the
# mechanisms our schema and request context rest on (CitusTests). Only on the project's own servers.
# (Issue 56 tried CitusTests beside the distributed stage, in two processes: 172 s instead of 206, but two
# `scripts/citus.sh createdb` at once failed with "tuple concurrently updated": two sessions updated one catalog
# row, and what a node's databases share (its roles) is what both make and change. One after the other.)
# Restores from the pgBackRest repository (scripts/cluster.sh's formation): a mistaken DELETE undone to the second
# (also after a failover), the loss of every node (RPO, RTO), a migration undone by its restore point. In the
# background, beside the two Citus stages, which leave the machine half idle (48 % and 62 % of the two cores busy,
# make test of 2026-11-30; the drills 48-80 %), issue 56: make test 903 s -> 762 s here (with the fresh database
# below), 912 s -> 827 and 851 s after set-up on a clean clone. Tried before (stop 61) and left: the
# drills' DELETE FROM poop_logs then ran over cluster.sh's 60 s, a per-row cost that grew with every earlier run's
# rows, which the formation kept (sql/0041; the database is now made again first, empty). On the project's own
# servers only, where pg_auto_failover is installed or installable (root); packages installed at set-up.
drills_pid= drills_started=
if [ -z "${DATABASE_URL:-}" ] && cluster_possible && ! skipped drills "the restore drills"; then
  echo "test: the restore drills (scripts/backup_drill.py), in the background beside the Citus stages" >&2
  drills_started=$SECONDS
  bin="$("$SWIFT" build --show-bin-path)/poopypals"
  { scripts/cluster.sh start >/dev/null && scripts/cluster.sh fresh-database \
      && python3 scripts/backup_drill.py --binary "$bin" --keep-cluster; } >"$logs/drills.log" 2>&1 &
  drills_pid=$!
fi

echo
stage_header "Citus: a coordinator and two workers (scripts/citus.sh)"
if [ -n "${DATABASE_URL:-}" ]; then
  echo "test: NOT RUN: the Citus tests (they start their own cluster: run make test without DATABASE_URL)" >&2
elif [ "$citus_install" = 3 ]; then
  echo "test: NOT RUN: the Citus tests (scripts/citus.sh install said why above)" >&2
elif [ "$citus_install" != 0 ]; then
  echo "test: scripts/citus.sh install exited $citus_install" | tee -a "$citus_said" >&2
  fail "Citus" "$citus_said"
elif ! citus_url=$(scripts/citus.sh start 2> >(tee -a "$citus_said" >&2)); then
  echo "test: scripts/citus.sh start failed" | tee -a "$citus_said" >&2
  fail "Citus" "$citus_said"
else
  if ! POOPYPALS_TEST_CITUS_URL=$citus_url POOPYPALS_TEST_CITUS_SOCKETS=$(scripts/citus.sh socket-dir) \
       "$SWIFT" test --skip-build --disable-xctest --filter CitusTests 2>&1 | tee "$logs/citus.log"; then
    fail "Citus" "$logs/citus.log"
  elif ran_no_test "$logs/citus.log" "the Citus stage"; then
    fail "Citus" "$logs/citus.log"
  else
    # The isolation, repository, sync, key and HTTP suites on the distributed schema: each test's database made on
    # every node (scripts/citus.sh createdb) and distributed by `poopypals migrate`'s migrations, so a device's
    # rows are on a worker's shard, the reference tables on every node, and each request's context, role and
    # policies are checked where its shard is. No template can be copied there: a few seconds per test, so these
    # suites only (the ones the device's requests go through).
    # (Until issue 56 every suite also ran a second time on the coordinator, citus in each test database but its
    # tables local: 346 s. What it alone proved, the service's Citus form of the device context (docs/scaling.md)
    # accepted by policies and functions, is proved on the real shape here: these suites and the HTTP routes' suite
    # (RouteTests, added for it) send every device statement in that form, to a worker's shard; CitusTests prove
    # the form reaches the workers. The other suites test nothing that citus's presence changes.)
    echo
    stage_header "The device's suites on the distributed schema (a database on every node per test)"
    if skipped distributed "the device's suites on the distributed schema"; then
      :
    elif ! POOPYPALS_TEST_CITUS_DISTRIBUTED=1 DATABASE_URL=$citus_url POOPYPALS_TEST_SUPERUSER_URL=$(scripts/citus.sh superuser-url) \
         "$SWIFT" test --skip-build --disable-xctest --no-parallel \
         --filter "$distributed_suites" 2>&1 | tee "$logs/citus-distributed.log"; then
      fail "the device's suites on the distributed schema" "$logs/citus-distributed.log"
    elif ran_no_test "$logs/citus-distributed.log" "the distributed stage"; then
      fail "the device's suites on the distributed schema" "$logs/citus-distributed.log"
    fi
    # The one database the last test handed on (TestDatabase's DistributedDatabases), and any a crash left.
    for name in $(psql "$(scripts/citus.sh superuser-url)" -X -A -t -c "SELECT datname FROM pg_database WHERE datname ~ '^t_[0-9a-f]{20}$'" 2>/dev/null); do
      scripts/citus.sh dropdb "$name" || true
    done
  fi
fi
[ -n "${DATABASE_URL:-}" ] || scripts/citus.sh stop >/dev/null 2>&1 || true

if [ -n "$drills_pid" ]; then
  echo
  stage_header "the restore drills, begun beside the Citus stages: what is left of them"
  drills_status=0
  wait "$drills_pid" || drills_status=$?
  beside_names+=("restore drills (scripts/backup_drill.py), beside the Citus stages") beside_seconds+=($((SECONDS - drills_started)))
  cat "$logs/drills.log"
  if [ "$drills_status" != 0 ]; then
    fail "restore drills" "$logs/drills.log"
  elif ! grep -q "verify passed" "$logs/drills.log"; then
    echo "test: the restore drills exited 0 without their last check (the repository verified)" >&2
    fail "restore drills" "$logs/drills.log"
  fi
fi

# Thousands of connections to a server process take both cores for a while: alone, after the rest, once (they
# test the HTTP server, not the database version), so that they neither disturb nor are disturbed by timing tests.
echo
stage_header "under load (${labels[0]})"
if skipped load "the tests under load"; then
  :
elif ! DATABASE_URL=${urls[0]} PGBOUNCER_URL=${bouncers[0]} POOPYPALS_TEST_SUPERUSER_URL=${superusers[0]} \
     POOPYPALS_TEST_PG_BINDIR=${bindirs[0]} "$SWIFT" test --skip-build --disable-xctest --filter LoadTests \
     2>&1 | tee "$logs/load.log"; then
  fail "under load" "$logs/load.log"
fi

# A device with a million logs rotated and erased (issue 41): a minute of one core, in the background beside the
# generated client and the fuzzer (issue 56: it ran alone, 116 s at 54 % of the two cores): none of the three
# asserts a time, and they share nothing but the server (each has databases of its own).
echo
stage_header "a device with a million logs, beside the generated Swift client and fuzzing (${labels[0]})"
# (--ignore-lock: SwiftPM holds a lock on .build while `swift test` runs; this one only runs what is built.)
large_tests=
if ! skipped large "the device with a million logs"; then
  DATABASE_URL=${urls[0]} PGBOUNCER_URL=${bouncers[0]} POOPYPALS_TEST_SUPERUSER_URL=${superusers[0]} \
    POOPYPALS_TEST_PG_BINDIR=${bindirs[0]} "$SWIFT" test --skip-build --disable-xctest --ignore-lock --filter LargeDeviceTests \
    >"$logs/large.log" 2>&1 &
  large_tests=$!
fi

# The client swift-openapi-generator makes from openapi.yaml calls every route (clients/swift, its own package).
echo "test: the generated Swift client (${labels[0]})" >&2
if ! SWIFT="$SWIFT" scripts/client.sh "${urls[0]}" "$("$SWIFT" build --show-bin-path)/poopypals" 2>&1 | tee "$logs/client.log"; then
  fail "generated client" "$logs/client.log"
fi

# The spec and the server agree under a fuzzer (schemathesis from PyPI, in .venv-st), once: one pass of every
# phase, 150 examples per operation (about 3 400 cases, 80 s: shorter than the million-log device beside it). Not a
# time budget: schemathesis then repeats its phases until the budget is spent, and where the budget cut a pass
# decided a warning (120 s failed "validation mismatch" on POST /v1/sync once, stop 61's first make test: a rerun of
# its coverage cut short). `make fuzz` runs the long campaign (600 s) on its own.
echo "test: fuzzing openapi.yaml (${labels[0]})" >&2
if ! FUZZ_MAX_TIME= FUZZ_MAX_EXAMPLES=${FUZZ_MAX_EXAMPLES:-150} scripts/fuzz.sh "${urls[0]}" "$("$SWIFT" build --show-bin-path)/poopypals" 2>&1 | tee "$logs/fuzzing.log"; then
  fail "fuzzing" "$logs/fuzzing.log"
fi
if [ -n "$large_tests" ]; then
  echo "test: the device with a million logs, which ran beside them:" >&2
  large_status=0
  wait "$large_tests" || large_status=$?
  cat "$logs/large.log"
  if [ "$large_status" != 0 ]; then
    fail "a device with a million logs" "$logs/large.log"
  elif ran_no_test "$logs/large.log" "the million-log stage"; then
    fail "a device with a million logs" "$logs/large.log"
  fi
fi

# High availability on a real cluster (scripts/cluster.sh: pg_auto_failover, a monitor and three PostgreSQL 15 nodes
# with synchronous replication, ANY 1 of two standbys, one PgBouncer per node), through the real `poopypals serve`
# under load: a killed primary, a hung primary, a killed standby and a switchover, then the switchover again behind
# PgBouncer (the cluster's tuned PgBouncers, then PgBouncers with only what the README requires: writes may stop
# 5 s at most). Every scenario also watches that no primary acknowledges commits with one copy. Only on
# the project's own servers (not with DATABASE_URL), and where pg_auto_failover is installed or installable (root).
if [ -z "${DATABASE_URL:-}" ]; then
  echo
  stage_header "failover on a pg_auto_failover cluster (scripts/failover.py)"
  if ! cluster_possible; then
    echo "test: NOT RUN: the failover scenarios (install pg-auto-failover-cli, postgresql-15-auto-failover and pgbouncer, or run as root)" >&2
  else
    bin="$("$SWIFT" build --show-bin-path)/poopypals"
    if ! { python3 scripts/failover.py --binary "$bin" --scenario all --keep-cluster \
           && python3 scripts/failover.py --binary "$bin" --scenario switchover --pgbouncer --keep-cluster \
           && python3 scripts/failover.py --binary "$bin" --scenario switchover --pgbouncer-defaults --keep-cluster; } \
         2>&1 | tee "$logs/failover.log"; then
      fail "failover" "$logs/failover.log"
    fi
    # Reads on the standby that never show less than the write (Consistency-Token), with its replay delayed.
    echo
    stage_header "reads on a standby (scripts/readscale.py)"
    python3 scripts/readscale.py --binary "$bin" 2>&1 | tee "$logs/readscale.log" || fail "reads on a standby" "$logs/readscale.log"
    scripts/cluster.sh stop >/dev/null 2>&1 || true
  fi
fi

echo
stage_times
[ ${#login_lines[@]} -eq 0 ] || printf '%s\n' "${login_lines[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
  # What each PgBouncer did, summed up: why it closed connections (a normal run has client close requests, servers
  # of dropped test databases, the query_wait_timeouts of tests that fill a pool on purpose) and its last errors other than
  # dropped databases. CI's servers are gone when its output is read; a client's "server closed the connection"
  # through PgBouncer is explained here or nowhere (CI of stop 60).
  for i in "${!bouncer_logs[@]}"; do
    [ -r "${bouncer_logs[$i]}" ] || continue
    this_run=$(tail -n +"$((bouncer_log_lines[i] + 1))" "${bouncer_logs[$i]}")  # this run's lines only
    { grep -o 'closing because: [^(]*' <<<"$this_run" | sort | uniq -c | sort -rn | head -12
      grep -E 'ERROR|WARNING' <<<"$this_run" | grep -v -e 'does not exist' -e 'dropping database' | tail -6
    } | cut -c1-300 | sed "s|^|test: pgbouncer ${labels[$i]}: |" >&2 || true
  done
  # What each server said above its errors (the tests' own ERRORs are many and expected): its FATAL, PANIC and
  # WARNING messages this run, counted (a server refusing or dropping logins says so here: too many clients,
  # could not fork, out of memory), its label from the order the servers were started in.
  for i in "${!server_logs[@]}"; do
    [ -r "${server_logs[$i]}" ] || continue
    # (Less what every run has: a dropped test database's clients told it no longer exists, and its backends
    # ended by DROP DATABASE … WITH (FORCE), as the PgBouncer summary above drops them.)
    tail -n +"$((server_log_lines[i] + 1))" "${server_logs[$i]}" | grep -E '(FATAL|PANIC|WARNING): ' \
      | grep -v -E 'FATAL: +(database "[^"]*" does not exist|terminating connection due to administrator command)' \
      | sed -E 's/^.*(FATAL|PANIC|WARNING): +/\1: /; s/t_[0-9a-f]{20}/t_…/g; s/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -8 \
      | cut -c1-300 | sed "s|^|test: server ${labels[$i]}: |" >&2 || true
  done
  # Then the failed tests' issues, last: CI shows only the run's last lines, and the PgBouncer summary above once
  # filled them (CI of stop 62 showed which stages failed and not why).
  # Swift Testing marks each issue of a failed test with ✘ … recorded an issue, followed by its ↳ lines (what was
  # expected, the comment) and the comment's further lines, indented (a server's log). Only those, compact: CI shows
  # the end of the run, and the lines of passing tests that ran beside a failure once pushed another failure's issue
  # off that screen (CI of stop 49).
  for log in "${failed_logs[@]}"; do
    [ -e "$log" ] || continue
    issues=$(awk '/✘.*recorded an issue/ { print; more = 1; next } more && /^([[:space:]]*↳|  )/ { print; next } { more = 0 }' "$log")
    # A crash (the test process's backtrace: what crashed and the crashing thread's first frames; a crash at exit
    # after a passed run once failed both PostgreSQL stages of CI with no test failed), then a stage that failed with
    # no test issue recorded (a script's error, no test run): its last lines.
    [ -n "$issues" ] || issues=$(awk '/\*\*\* Program crashed/ { print } /^Thread [0-9]+ .* crashed:/ { n = 14 } n > 0 && !/^[[:space:]]*$/ { print; n-- }' "$log" | head -16)
    [ -n "$issues" ] || issues=$(grep -v '^[[:space:]]*$' "$log" | tail -8)
    printf '%s\n' "$issues" | cut -c1-400 | head -40 | sed "s|^|test: $(basename "$log" .log): |" >&2 || true
  done
  # How slow logins were while the suites ran (a failed login is the commonest failure of a loaded machine).
  [ ${#login_lines[@]} -eq 0 ] || printf '%s\n' "${login_lines[@]}" >&2
  # And each failed stage's first issues once more, a line each, right above the verdict: the lines above can be
  # many (a server's log in a comment), and what is read of a CI run may be its last thirty lines only.
  for log in "${failed_logs[@]}"; do
    [ -e "$log" ] || continue
    grep -a -e '✘.*recorded an issue' -e '\*\*\* Program crashed' "$log" | head -5 | cut -c1-300 | sed "s|^|test: $(basename "$log" .log): |" >&2 || true
  done
  printf 'test: FAILED on %s\n' "${failed[@]}" >&2
  exit 1
fi
passed=$(printf ', %s' "${labels[@]}")
echo "test: passed on ${passed#, }"
