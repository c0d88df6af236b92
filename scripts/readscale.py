#!/usr/bin/env python3
"""Read scaling through the real `poopypals serve`: reads on the standby, read-your-writes with Consistency-Token
(Python 3 standard library only).

    scripts/readscale.py --binary PATH [--migrations-dir DIR] [--keep-cluster]

Uses the pg_auto_failover formation of scripts/cluster.sh (started if needed, stopped at the end when this script
started it, unless --keep-cluster), applies the migrations as scripts/failover.py does, delays the standby's replay
(ALTER SYSTEM SET recovery_min_apply_delay = '1500ms' as the postgres superuser over the node's private socket; RESET
at the end, always), and starts `PATH serve` with DATABASE_URL = the multi-host read-write URL and
POOPYPALS_READ_DATABASE_URL = the standby alone. With one registered device:

  a. 100 × POST /v1/logs, then at once GET /v1/logs/{id} with the write's Consistency-Token: all 100 must be 200.
  b. 100 × POST /v1/logs, then at once GET /v1/logs/{id} without a token: most must be 404 (the standby lags 1.5 s;
     at least half), and the standby's pg_stat_database.xact_commit (database poopypals) must grow by >= 90.
  c. POST /v1/sync (one upsert), then GET /v1/sync with its token: the pushed id is among the changes.
     c2. POST /v1/sync with the puller's cursor, then at once GET /v1/sync with the cursor it answered and no header:
     the pushed id is among the changes.
  d. GET /v1/logs with `Consistency-Token: garbage`: 400 `invalid_field`.
  e. POST /v1/logs, then GET /v1/export with its token: 200 and the log is in it.
  f. poopypals_db_reads_on_primary_total (serve's metrics listener) grew by >= 1 during (a); the fraction of token
     reads the standby served is 1 - that growth / 100.
  g. No write answered 5xx (nor failed to connect); every successful write carried a Consistency-Token.

Every request is bounded (20 s); the workload is bounded (120 s). A summary table on stdout; exit 0 when every check
holds, 1 when one fails (each named), 2 when the harness itself could not run. serve's log is kept in
/tmp/poopypals-readscale-PID/ when something failed.
"""
import argparse
import base64
import collections
import http.client
import importlib.util
import json
import os
import queue
import random
import re
import secrets
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit, unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
BINDIR = "/usr/lib/postgresql/15/bin"

sys.dont_write_bytecode = True  # no __pycache__ in scripts/ from importing failover.py
# scripts/failover.py's helpers: cluster(), migrate(), now_rfc3339(), HarnessError (its main() runs only as a script).
_spec = importlib.util.spec_from_file_location("poopypals_failover", os.path.join(ROOT, "scripts", "failover.py"))
failover = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(failover)
HarnessError, cluster, migrate, now_rfc3339 = failover.HarnessError, failover.cluster, failover.migrate, failover.now_rfc3339

APPLY_DELAY = "1500ms"
PAIRS = 100
CLIENT_TIMEOUT = 20.0
WORKLOAD_BUDGET = 120.0     # seconds for steps a-f, serve's start excluded
STATS_SETTLE = 11.0         # an idle backend flushes its pending statistics within 10 s (PGSTAT_IDLE_INTERVAL)
METRIC = "poopypals_db_reads_on_primary_total"


def say(message):
    print(f"readscale: {message}", file=sys.stderr, flush=True)


# --- the cluster's own files (as scripts/cluster.sh locate_state / socket_dir find them) ------------------------------
def owner_command(argv):
    """Run as the cluster owner: `postgres` when we are root (PostgreSQL refuses root), like cluster.sh as_owner."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.getuid() == 0 else list(argv)


def state_dir():
    """Where scripts/cluster.sh keeps the cluster (it decides: .cluster/, or root's /var/lib/poopypals/…)."""
    found = subprocess.run([CLUSTER, "state-dir"], capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        raise HarnessError(f"scripts/cluster.sh state-dir failed: {found.stderr.strip()}")
    return found.stdout.strip()


def socket_dir(state):
    try:
        with open(os.path.join(state, "socket_dir")) as f:
            return f.read().strip()
    except OSError:
        raise HarnessError(f"no {state}/socket_dir: is the cluster made by scripts/cluster.sh?")


def psql_socket(sock, port, *sql, database="postgres"):
    """As the postgres superuser over the node's private socket, 5 s at most; each SQL runs as its own -c (so ALTER
    SYSTEM is not inside a transaction block). stdout, stripped."""
    argv = ["timeout", "5", f"{BINDIR}/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", sock, "-p",
            str(port), "-U", "postgres", "-d", database]
    for statement in sql:
        argv += ["-c", statement]
    done = subprocess.run(owner_command(argv), capture_output=True, text=True, timeout=15)
    if done.returncode != 0:
        raise HarnessError(f"psql on port {port} ({'; '.join(sql)}) failed: {done.stderr.strip()}")
    return done.stdout.strip()


def xact_commit(sock, port):
    # Asked from the database postgres, so this session's own transactions do not count in poopypals'.
    return int(psql_socket(sock, port, "SELECT xact_commit FROM pg_stat_database WHERE datname = 'poopypals'"))


# --- the service -----------------------------------------------------------------------------------------------------
class Service(failover.Service):
    """failover.py's serve, with the standby as its read pool, and its metrics read."""

    def __init__(self, binary, url, read_url, log_path):
        super().__init__(binary, url, False, log_path, environment={"POOPYPALS_READ_DATABASE_URL": read_url})

    def reads_on_primary(self):
        """The sum of the counter's samples; None when the family is absent."""
        host, port = self.metrics
        conn = http.client.HTTPConnection(host, port, timeout=CLIENT_TIMEOUT)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
        except (OSError, http.client.HTTPException) as error:
            raise HarnessError(f"GET http://{host}:{port}/metrics failed: {error}")
        finally:
            conn.close()
        if response.status != 200:
            raise HarnessError(f"GET http://{host}:{port}/metrics answered {response.status}")
        values = [float(m.group(1)) for m in re.finditer(rf"^{METRIC}(?:\{{[^}}]*\}})?\s+(\S+)", text, re.M)]
        return sum(values) if values else None


# --- HTTP ------------------------------------------------------------------------------------------------------------
class Answer:
    def __init__(self, method, path):
        self.method, self.path = method, path
        self.status = self.code = self.token = self.error = self.body = None
        self.duration = 0.0

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300

    @property
    def label(self):
        if self.error:
            return f"ERR {self.error}"
        return str(self.status) if self.ok else f"{self.status} {self.code or '-'}"


class Client:
    def __init__(self, port, device):
        self.port, self.device = port, device
        self.writes = []   # every write's Answer (check g)

    def call(self, method, path, body=None, token=None):
        """One request on a connection of its own, bounded by CLIENT_TIMEOUT (failover.py's exchange)."""
        answer = Answer(method, path)
        headers = {"X-Device-ID": self.device}
        if token is not None:
            headers["Consistency-Token"] = token
        status, response_headers, payload, error, seconds = failover.exchange(self.port, method, path, headers, body, CLIENT_TIMEOUT)
        answer.status, answer.error, answer.duration = status, error, seconds
        answer.token = response_headers.get("Consistency-Token") if response_headers is not None else None
        if status is not None and payload:
            answer.body = failover.decode_json(payload)
            if status >= 400:
                answer.code = failover.error_code(answer.body)
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            self.writes.append(answer)
        return answer

    def new_log(self):
        log_id = str(uuid.uuid4())
        return log_id, self.call("POST", "/v1/logs", {"id": log_id, "occurredAt": now_rfc3339(),
                                                      "bristolType": random.randint(1, 7)})


def counts(labels):
    return ", ".join(f"{label}×{n}" for label, n in collections.Counter(labels).most_common()) or "-"


def strip_position(cursor):
    """A sync cursor `s2|seq|lsn` (base64url) as `s1|seq`: the same place, no position to wait for; None otherwise."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    parts = text.split("|")
    if len(parts) != 3 or parts[0] != "s2":
        return None
    return base64.urlsafe_b64encode(f"s1|{parts[1]}".encode()).decode().rstrip("=")


# --- the checks ------------------------------------------------------------------------------------------------------
class Run:
    def __init__(self, service, client, sock, secondary):
        self.service, self.client, self.sock, self.secondary = service, client, sock, secondary
        self.failures = []
        self.rows = []
        self.deadline = time.monotonic() + WORKLOAD_BUDGET

    def fail(self, message):
        self.failures.append(message)
        say(f"FAILED: {message}")

    def in_time(self, step):
        if time.monotonic() > self.deadline:
            self.fail(f"{step}: the workload ran out of its {WORKLOAD_BUDGET:.0f} s")
            return False
        return True

    def with_token(self):
        """a. read-your-writes: the token read right after the write always sees it."""
        before = self.service.reads_on_primary()
        seen, failed, no_token, write_failed = 0, [], 0, []
        for _ in range(PAIRS):
            if not self.in_time("pairs with token"):
                break
            log_id, write = self.client.new_log()
            if write.status != 201:
                write_failed.append(write.label)
                continue
            if not write.token:
                no_token += 1
                continue
            read = self.client.call("GET", f"/v1/logs/{log_id}", token=write.token)
            if read.status == 200 and isinstance(read.body, dict) and read.body.get("id") == log_id:
                seen += 1
            else:
                failed.append(read.label)
        after = self.service.reads_on_primary()
        self.rows.append(("pairs with token (read 200)", f"{seen} / {PAIRS}"))
        if write_failed:
            self.fail(f"pairs with token: POST /v1/logs not 201: {counts(write_failed)}")
        if no_token:
            self.fail(f"pairs with token: {no_token} POST /v1/logs 201 without a Consistency-Token header")
        if failed:
            self.fail(f"pairs with token: {len(failed)} of {PAIRS} reads did not see the write: {counts(failed)}")
        # f. reads the service sent to the primary during (a)
        if after is None:
            self.rows.append(("reads on primary during (a)", f"{METRIC} absent"))
            self.fail(f"{METRIC} is not on the metrics listener")
            return
        primary = after - (before or 0)
        self.rows.append(("reads on primary during (a)",
                          f"{primary:.0f} (token reads served by the standby: {1 - primary / PAIRS:.0%})"))
        if primary < 1:
            self.fail(f"{METRIC} grew by {primary:.0f} during (a) (expected >= 1 while replay lags {APPLY_DELAY})")

    def without_token(self):
        """b. reads without a token go to the standby: stale right after the write, counted in its xact_commit."""
        # Statistics of (a)'s standby sessions may still be pending in idle backends: let them flush first.
        time.sleep(STATS_SETTLE)
        before = xact_commit(self.sock, self.secondary)
        stale, seen, other, write_failed, stale_codes = 0, 0, [], [], []
        for _ in range(PAIRS):
            if not self.in_time("pairs without token"):
                break
            log_id, write = self.client.new_log()
            if write.status != 201:
                write_failed.append(write.label)
                continue
            read = self.client.call("GET", f"/v1/logs/{log_id}")
            if read.status == 404:
                stale += 1
                stale_codes.append(read.code or "-")
            elif read.status == 200:
                seen += 1
            else:
                other.append(read.label)
        time.sleep(STATS_SETTLE)
        grown = xact_commit(self.sock, self.secondary) - before
        self.rows.append(("pairs without token (read 404)",
                          f"{stale} stale / {PAIRS} (404 codes: {counts(stale_codes)}; 200: {seen})"))
        self.rows.append(("standby transactions (poopypals)", f"+{grown}"))
        if write_failed:
            self.fail(f"pairs without token: POST /v1/logs not 201: {counts(write_failed)}")
        if other:
            self.fail(f"pairs without token: reads answered neither 200 nor 404: {counts(other)}")
        if stale < PAIRS // 2:
            self.fail(f"pairs without token: only {stale} of {PAIRS} reads were stale (replay lags {APPLY_DELAY}: "
                      "token-less reads do not seem to go to the standby)")
        # Statistics reach pg_stat_database when a backend goes idle (and at most once a second): 90 % is the floor,
        # so that a report still on its way does not fail the run; a read pool that is not used gives ~0.
        if grown < PAIRS * 9 // 10:
            self.fail(f"the standby's xact_commit grew by {grown} during {PAIRS} token-less reads (expected >= {PAIRS * 9 // 10})")

    def push_then_pull(self):
        """c. POST /v1/sync, then GET /v1/sync with its token: the pushed log is among the changes."""
        log_id = str(uuid.uuid4())
        push = self.client.call("POST", "/v1/sync", {"operations": [
            {"op": "upsert", "log": {"id": log_id, "occurredAt": now_rfc3339(), "bristolType": 4}}]})
        result = "?"
        if not push.ok:
            result = f"push {push.label}"
        elif not push.token:
            result = "push without a Consistency-Token"
        else:
            cursor, found, pages = None, False, 0
            while pages < 20 and self.in_time("push-then-pull"):
                pages += 1
                pull = self.client.call("GET", "/v1/sync?limit=500" + (f"&cursor={cursor}" if cursor else ""),
                                        token=push.token)
                if pull.status != 200 or not isinstance(pull.body, dict):
                    result = f"pull {pull.label}"
                    break
                found = found or any(isinstance(c, dict) and c.get("op") == "upsert"
                                     and (c.get("log") or {}).get("id") == log_id for c in pull.body.get("changes", []))
                cursor = pull.body.get("cursor")
                if not pull.body.get("hasMore") or not cursor:
                    result = "ok" if found else f"pushed id missing from {pages} page(s) of changes"
                    break
        self.rows.append(("push-then-pull", result))
        if result != "ok":
            self.fail(f"push-then-pull: {result}")

    def pull_all(self, cursor, token=None):
        """GET /v1/sync from `cursor` until hasMore is false (at most 20 pages): (ids upserted, last cursor, error)."""
        ids = set()
        for _ in range(20):
            if not self.in_time("pull"):
                return ids, cursor, "out of time"
            pull = self.client.call("GET", "/v1/sync?limit=500" + (f"&cursor={cursor}" if cursor else ""), token=token)
            if pull.status != 200 or not isinstance(pull.body, dict):
                return ids, cursor, f"pull {pull.label}"
            ids.update((c.get("log") or {}).get("id") for c in pull.body.get("changes", [])
                       if isinstance(c, dict) and c.get("op") == "upsert")
            cursor = pull.body.get("cursor")
            if not pull.body.get("hasMore") or not cursor:
                return ids, cursor, None
        return ids, cursor, "20 pages and still hasMore"

    def push_then_pull_by_cursor(self):
        """c2. the puller's cursor sent with a push, then at once GET /v1/sync with the cursor the push answered and
        no header: the push is among the changes (the cursor carries its position)."""
        before = self.service.reads_on_primary()
        _, cursor, error = self.pull_all(None)
        log_id = str(uuid.uuid4())
        result = error
        if error is None:
            body = {"operations": [{"op": "upsert", "log": {"id": log_id, "occurredAt": now_rfc3339(), "bristolType": 3}}]}
            if cursor:
                body["cursor"] = cursor
            push = self.client.call("POST", "/v1/sync", body)
            answered = push.body.get("cursor") if isinstance(push.body, dict) else None
            if not push.ok:
                result = f"push {push.label}"
            elif not answered:
                result = "the push answered no cursor"
            else:
                # The same place without the position, at once: on the lagging standby it misses the push (shown,
                # not checked: it shows the standby is behind, which is what the position is for).
                stripped = strip_position(answered)
                without = "?" if stripped is None else ("seen" if log_id in self.pull_all(stripped)[0] else "missed")
                ids, _, error = self.pull_all(answered)
                result = error or ("ok" if log_id in ids else "pushed id missing from the pull with the push's cursor")
                result += f"; the same cursor without its position {without} it"
        after = self.service.reads_on_primary()
        moved = (after or 0) - (before or 0)
        self.rows.append(("push-then-pull by cursor, no header", f"{result} (pulls run on the primary: {moved:.0f})"))
        if not result.startswith("ok;"):
            self.fail(f"push-then-pull by cursor: {result}")

    def bad_token(self):
        """d. a malformed token is a 400 invalid_field."""
        answer = self.client.call("GET", "/v1/logs?limit=1", token="garbage")
        self.rows.append(("bad token", answer.label))
        if answer.status != 400 or answer.code != "invalid_field":
            self.fail(f"GET /v1/logs with Consistency-Token: garbage answered {answer.label} (expected 400 invalid_field)")

    def export(self):
        """e. GET /v1/export with the token of the write just before it: 200, the log is in it."""
        log_id, write = self.client.new_log()
        if write.status != 201 or not write.token:
            result = f"write {write.label}{'' if write.token else ' without a token'}"
        else:
            answer = self.client.call("GET", "/v1/export", token=write.token)
            if answer.status != 200 or not isinstance(answer.body, dict):
                result = f"export {answer.label}" + ("" if answer.status != 200 else " (not a JSON object: cut off?)")
            elif not any(isinstance(l, dict) and l.get("id") == log_id for l in answer.body.get("logs", [])):
                result = f"the write is missing from the export ({len(answer.body.get('logs', []))} logs)"
            else:
                result = "ok"
        self.rows.append(("export after a write", result))
        if result != "ok":
            self.fail(f"export: {result}")

    def writes(self):
        """g. no write answered 5xx or failed to connect; every 2xx write carried a token."""
        writes = self.client.writes
        broken = [w.label for w in writes if w.error or (w.status or 0) >= 500]
        tokenless = [f"{w.method} {w.path.split('?')[0]}" for w in writes if w.ok and not w.token]
        slowest = max((w.duration for w in writes), default=0.0)
        self.rows.append(("writes", f"{len(writes)}, 5xx/errors {len(broken)}, without token {len(tokenless)}, "
                                    f"slowest {slowest:.2f} s"))
        if broken:
            self.fail(f"writes answered 5xx or failed: {counts(broken)}")
        if tokenless:
            self.fail(f"successful writes without a Consistency-Token: {counts(tokenless)}")


def password_of(url):
    parsed = urlsplit(url)
    if not parsed.password:
        raise HarnessError("the cluster's URL carries no password")
    return unquote(parsed.password)


def main():
    args = failover.parse_common_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))

    # SIGTERM unwinds like Ctrl-C, so the finally blocks reset the delay, stop serve and the cluster.
    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)

    workdir = os.path.join("/tmp", f"poopypals-readscale-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    was_running = subprocess.run([CLUSTER, "status"], capture_output=True, timeout=30).returncode == 0
    started = time.monotonic()
    run = None
    try:
        cluster("start", timeout=240)
        cluster("wait-healthy", "90", timeout=100)
        direct = cluster("url")
        migrate(args.binary, direct, args.migrations_dir)
        secondary = int(cluster("secondary-port"))
        sock = socket_dir(state_dir())
        read_url = f"postgresql://poopypals:{password_of(direct)}@127.0.0.1:{secondary}/poopypals"

        delayed = False
        service = None
        try:
            delayed = True  # from here on, RESET whatever happens
            psql_socket(sock, secondary, f"ALTER SYSTEM SET recovery_min_apply_delay = '{APPLY_DELAY}'",
                        "SELECT pg_reload_conf()")
            deadline = time.monotonic() + 10
            while psql_socket(sock, secondary, "SHOW recovery_min_apply_delay") != APPLY_DELAY:
                if time.monotonic() > deadline:
                    raise HarnessError(f"recovery_min_apply_delay is not {APPLY_DELAY} on 127.0.0.1:{secondary} "
                                       "10 s after pg_reload_conf()")
                time.sleep(0.2)
            say(f"standby 127.0.0.1:{secondary} replays {APPLY_DELAY} late; primary 127.0.0.1:"
                f"{cluster('primary-port')} (synchronous_commit "
                f"{psql_socket(sock, int(cluster('primary-port')), 'SHOW synchronous_commit')})")

            service = Service(args.binary, direct, read_url, os.path.join(workdir, "serve.log"))
            say(f"serve on 127.0.0.1:{service.port}, metrics on {service.metrics[0]}:{service.metrics[1]}")
            client = Client(service.port, str(uuid.uuid4()))
            deadline = time.monotonic() + 20
            while True:
                registered = client.call("PUT", "/v1/device")
                if registered.ok:
                    break
                if time.monotonic() > deadline:
                    raise HarnessError(f"PUT /v1/device answered {registered.label} for 20 s "
                                       f"(log: {service.log_path})")
                time.sleep(0.5)
            run = Run(service, client, sock, secondary)
            run.with_token()
            run.without_token()
            run.push_then_pull()
            run.push_then_pull_by_cursor()
            run.bad_token()
            run.export()
            run.writes()
        finally:
            if service is not None:
                service.stop()
            if delayed:
                try:
                    psql_socket(sock, secondary, "ALTER SYSTEM RESET recovery_min_apply_delay",
                                "SELECT pg_reload_conf()")
                except (HarnessError, subprocess.TimeoutExpired) as error:
                    say(f"could not reset recovery_min_apply_delay on 127.0.0.1:{secondary}: {error}")
    except HarnessError as error:
        say(f"error: {error}")
        say(f"serve log in {workdir}")
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 2
    finally:
        if not was_running and not args.keep_cluster:
            subprocess.run([CLUSTER, "stop"], timeout=120)

    say(f"total {time.monotonic() - started:.0f} s")
    if run.failures:
        with open(service.log_path, errors="replace") as f:
            tail = f.readlines()[-15:]
        say(f"serve log kept in {service.log_path}; its last lines:")
        sys.stderr.writelines("  " + line for line in tail)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(name) for name, _ in run.rows)
    for name, value in run.rows:
        print(f"{name.ljust(width)}  {value}")
    for failure in run.failures:
        print(f"FAILED {failure}")
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
