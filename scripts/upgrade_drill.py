#!/usr/bin/env python3
"""A rolling upgrade and a rollback under load, with the previous release's own binary (issue 55; Python 3 standard
library only).

    scripts/upgrade_drill.py --previous-binary PATH --previous-migrations DIR --binary PATH --migrations-dir DIR
                             --database-url URL [--extra-migration FILE]

On a database of its own (created beside the one URL names, dropped at the end): the previous release migrates it
with its own migrations and serves it (two instances), twelve phones call them all along (registering, creating,
patching, deleting, listing, pushing, pulling; a third of them with a profile; new phones registering now and
then), through a balancer that sends each request to one of the instances in service, each request on a connection
of its own. Then, as an operator rolling a deployment would:

  1. old release alone;
  2. this release's `migrate` (its pre-deployment migrations) under that load;
  3. the old release on the migrated database;
  4. old and new side by side (two new instances join; the old ones leave);
  5. the new release alone;
  6. a rollback: two old instances take over again on the migrated database;
  7. forward again: two new instances replace them;
  8. this release's `migrate --post-deployment` under load, then the new release after it.

An instance joins the balancer once its /readyz answers 200, and leaves it before it is stopped (SIGTERM, after its
requests in flight are answered), as a load balancer's deregistration would have it. At the end a fresh instance of
this release reads every phone's logs: each acknowledged create, change and delete must be there, as acknowledged.

Criteria: every answer in every phase is 2xx (no 5xx, no 4xx, no connection refused or reset, none slower than
20 s), and nothing acknowledged is missing or different. A table of answers and failures per phase on stdout.
--extra-migration adds a file to a copy of this release's migrations (to show that a migration the previous release
cannot survive fails the drill). Exit 0 when every criterion holds, 1 when one fails (each named), 2 when the
harness itself could not run. The instances' logs are kept in /tmp/poopypals-upgrade-PID/ when something failed.
"""
import argparse
import base64
import collections
import hashlib
import hmac
import importlib.util
import json
import os
import random
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
_spec = importlib.util.spec_from_file_location("poopypals_failover", os.path.join(ROOT, "scripts", "failover.py"))
failover = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(failover)
HarnessError, exchange, decode_json, error_code = failover.HarnessError, failover.exchange, failover.decode_json, failover.error_code

PHONES = 12
PAUSE = 0.01             # between two requests of one phone
CLIENT_TIMEOUT = 20.0
MAX_REQUESTS = 60000     # all phones together, whatever the phases' timing
STEADY = 4.0             # seconds of load in each phase
JOIN_WAIT = 30.0         # an instance's /readyz must answer 200 within this
SECRET = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(48))
LIMITS = {  # the phones write faster than one person would: the limits are not what this drill tests
    "POOPYPALS_DEVICE_WRITE_BURST": "1000000", "POOPYPALS_DEVICE_WRITES_PER_SECOND": "100000",
    "POOPYPALS_REGISTRATION_BURST": "1000000", "POOPYPALS_REGISTRATIONS_PER_HOUR": "100000000",
    "AUTH_JWT_SECRET": SECRET,
    # One server, no standby: failover.Service asks for a synchronous standby (the formation's scripts want one).
    "POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY": "0",
}


def say(message):
    print(f"upgrade: {message}", file=sys.stderr, flush=True)


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - random.randint(0, 86400)))


def token(subject, email):
    """An HS256 bearer token of the auth provider, as the service's tests mint them."""
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": subject, "email": email, "exp": int(time.time()) + 3600}).encode())
    signature = b64(hmac.new(SECRET.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


# --- the instances and the balancer -----------------------------------------------------------------------------------
class Instance(failover.Service):
    def __init__(self, release, binary, url, log_path):
        self.release = release
        super().__init__(binary, url, False, log_path, environment=LIMITS)
        deadline = time.monotonic() + JOIN_WAIT
        while True:
            status, _, _, _, _ = exchange(self.port, "GET", "/readyz", {}, timeout=5)
            if status == 200:
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise HarnessError(f"a {release} instance's /readyz did not answer 200 within {JOIN_WAIT:.0f} s (log: {log_path})")
            time.sleep(0.2)


class Balancer:
    """Sends each request to one instance in service, at random; counts what each has in flight."""

    def __init__(self):
        self.lock = threading.Lock()
        self.serving = []
        self.inflight = collections.Counter()

    def join(self, instance):
        with self.lock:
            self.serving.append(instance)

    def leave(self, instance):
        """Out of service, then stopped once its requests in flight are answered (at most 30 s)."""
        with self.lock:
            self.serving.remove(instance)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with self.lock:
                if self.inflight[instance.port] == 0:
                    break
            time.sleep(0.02)
        instance.stop()

    def releases(self):
        with self.lock:
            return "+".join(sorted({i.release for i in self.serving}))

    def call(self, method, path, headers, body=None):
        with self.lock:
            instance = random.choice(self.serving)
            self.inflight[instance.port] += 1
        try:
            status, response_headers, payload, error, seconds = exchange(instance.port, method, path, headers, body,
                                                                         CLIENT_TIMEOUT)
        finally:
            with self.lock:
                self.inflight[instance.port] -= 1
        return instance.release, status, response_headers, payload, error, seconds


# --- the phones ---------------------------------------------------------------------------------------------------------
class Load:
    """PHONES threads, each a phone doing what the app does, one request at a time; every outcome recorded with the
    phase it started in."""

    def __init__(self, balancer):
        self.balancer = balancer
        self.phase = "setup"
        self.lock = threading.Lock()
        self.outcomes = []           # (phase, release, method, route, status, code, error, seconds)
        self.stopping = threading.Event()
        self.expected = {}           # device -> {log id: bristolType} as acknowledged
        self.harness_errors = []
        self.threads = [threading.Thread(target=self._phone, args=(i,), daemon=True) for i in range(PHONES)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(CLIENT_TIMEOUT + 5)

    def _record(self, release, method, route, status, code, error, seconds, phase):
        with self.lock:
            self.outcomes.append((phase, release, method, route, status, code, error, seconds))
            return len(self.outcomes) < MAX_REQUESTS

    def request(self, method, path, route, device, body=None, bearer=None):
        """(ok, decoded body); every request is recorded."""
        phase = self.phase
        headers = {"X-Device-ID": device}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        release, status, _, payload, error, seconds = self.balancer.call(method, path, headers, body)
        decoded = decode_json(payload) if status is not None else None
        code = error_code(decoded) if status is not None and status >= 400 else None
        if not self._record(release, method, route, status, code, error, seconds, phase):
            self.stopping.set()
        ok = status is not None and 200 <= status < 300 and seconds <= CLIENT_TIMEOUT
        return ok, decoded

    def _phone(self, index):
        try:
            self._run_phone(index)
        except Exception as failure:  # a bug of the harness, not an answer of the service
            self.harness_errors.append(f"phone {index}: {type(failure).__name__}: {failure}")

    def _run_phone(self, index):
        device = str(uuid.uuid4())
        logs = {}
        with self.lock:
            self.expected[device] = logs
        bearer = None
        while not self.stopping.is_set():
            ok, _ = self.request("PUT", "/v1/device", "PUT /v1/device", device, {"model": "iPhone", "appVersion": "2.4.1"})
            if ok:
                break
            time.sleep(0.2)
        if index % 3 == 0:
            subject = str(uuid.uuid4())
            bearer = token(subject, f"phone{index}.{subject[:8]}@example.com")
        cursor = None
        step = 0
        while not self.stopping.is_set():
            step += 1
            choice = step % 10
            if choice in (1, 4, 7):  # create
                log_id, bristol = str(uuid.uuid4()), random.randint(1, 7)
                ok, _ = self.request("POST", "/v1/logs", "POST /v1/logs", device,
                                     {"id": log_id, "occurredAt": now_rfc3339(), "bristolType": bristol})
                if ok:
                    logs[log_id] = bristol
            elif choice == 2 and logs:  # change
                log_id, bristol = random.choice(list(logs)), random.randint(1, 7)
                ok, _ = self.request("PATCH", f"/v1/logs/{log_id}", "PATCH /v1/logs/{id}", device, {"bristolType": bristol})
                if ok:
                    logs[log_id] = bristol
            elif choice == 3 and len(logs) > 3:  # delete
                log_id = random.choice(list(logs))
                ok, _ = self.request("DELETE", f"/v1/logs/{log_id}", "DELETE /v1/logs/{id}", device)
                if ok:
                    del logs[log_id]
            elif choice == 5:  # push: two new logs and a delete, as an offline phone uploads later
                new = {str(uuid.uuid4()): random.randint(1, 7) for _ in range(2)}
                operations = [{"op": "upsert", "log": {"id": i, "occurredAt": now_rfc3339(), "bristolType": b}}
                              for i, b in new.items()]
                gone = random.choice(list(logs)) if len(logs) > 3 else None
                if gone:
                    operations.append({"op": "delete", "id": gone})
                ok, _ = self.request("POST", "/v1/sync", "POST /v1/sync", device, {"operations": operations})
                if ok:
                    logs.update(new)
                    if gone:
                        del logs[gone]
            elif choice == 6:  # pull
                path = "/v1/sync?limit=100" + (f"&cursor={cursor}" if cursor else "")
                ok, page = self.request("GET", path, "GET /v1/sync", device)
                if ok and isinstance(page, dict):
                    cursor = page.get("cursor") or cursor
            elif choice == 8:  # list
                self.request("GET", "/v1/logs?limit=20", "GET /v1/logs", device)
            elif choice == 9:
                if bearer:  # the profile: created once, then read and updated
                    self.request("PUT", "/v1/profile", "PUT /v1/profile", device, {"fullName": f"Phone {index} {step}"}, bearer=bearer)
                else:
                    self.request("GET", "/v1/device", "GET /v1/device", device)
            elif choice == 0:
                if step % 40 == 0:  # a new phone registers and logs once
                    other, log_id = str(uuid.uuid4()), str(uuid.uuid4())
                    ok, _ = self.request("PUT", "/v1/device", "PUT /v1/device", other)
                    if ok:
                        with self.lock:
                            self.expected[other] = {}
                        bristol = random.randint(1, 7)
                        ok, _ = self.request("POST", "/v1/logs", "POST /v1/logs", other,
                                             {"id": log_id, "occurredAt": now_rfc3339(), "bristolType": bristol})
                        if ok:
                            with self.lock:
                                self.expected[other][log_id] = bristol
                else:
                    self.request("PUT", "/v1/device", "PUT /v1/device", device, {"model": "iPhone", "appVersion": "2.4.1"})
            time.sleep(PAUSE)


# --- the database -----------------------------------------------------------------------------------------------------
def with_database(url, name):
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def psql(url, sql):
    done = subprocess.run(["psql", url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise HarnessError(f"psql ({sql.split()[0]} …) failed: {done.stderr.strip()[-400:]}")


def migrate(binary, url, migrations_dir, *extra):
    """`BINARY migrate [EXTRA]` with the given folder; its duration."""
    env = dict(os.environ, DATABASE_URL=url, POOPYPALS_MIGRATIONS_DIR=migrations_dir)
    started = time.monotonic()
    try:
        done = subprocess.run([binary, "migrate", "--migrations-dir", migrations_dir, *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{os.path.basename(binary)} migrate {' '.join(extra)} took more than 180 s")
    if done.returncode != 0:
        raise HarnessError(f"{os.path.basename(binary)} migrate {' '.join(extra)} failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-800:]}")
    return time.monotonic() - started


def read_back(binary, url, expected, log_path):
    """What a fresh instance of this release lists for each device, against what was acknowledged: problems."""
    instance = Instance("new", binary, url, log_path)
    problems = collections.Counter()
    checked = 0
    try:
        for device, logs in expected.items():
            found, before = {}, None
            while True:
                path = "/v1/logs?limit=200" + (f"&before={before}" if before else "")
                status, _, payload, error, _ = exchange(instance.port, "GET", path, {"X-Device-ID": device}, timeout=20)
                page = decode_json(payload)
                if status != 200 or not isinstance(page, dict):
                    problems[f"device(s) whose logs could not be read: GET /v1/logs answered {status or error}"] += 1
                    found = None
                    break
                found.update({item["id"]: item["bristolType"] for item in page["items"]})
                before = page.get("nextCursor")
                if not before:
                    break
            if found is None:
                continue
            checked += len(logs)
            problems["acknowledged log(s) missing"] += sum(1 for i in logs if i not in found)
            problems["acknowledged change(s) lost"] += sum(1 for i in logs if i in found and found[i] != logs[i])
            problems["acknowledged delete(s) undone, or unacknowledged writes applied"] += sum(1 for i in found if i not in logs)
    finally:
        instance.stop()
    return checked, [f"{count} {what}" for what, count in problems.items() if count]


# --- the drill --------------------------------------------------------------------------------------------------------
def run(args, workdir):
    new_sql = args.migrations_dir
    if args.extra_migration:
        new_sql = os.path.join(workdir, "sql")
        shutil.copytree(args.migrations_dir, new_sql)
        shutil.copy(args.extra_migration, new_sql)
        say(f"with {os.path.basename(args.extra_migration)} added to this release's migrations")
    name = f"upgrade_drill_{os.getpid()}"
    url = with_database(args.database_url, name)
    psql(args.database_url, f"DROP DATABASE IF EXISTS {name}")
    psql(args.database_url, f"CREATE DATABASE {name}")
    balancer = Balancer()
    load = Load(balancer)
    phases = []              # (label, seconds)
    instances = []
    serial = iter(range(1, 100))

    def start(release):
        binary = args.previous_binary if release == "old" else args.binary
        instance = Instance(release, binary, url, os.path.join(workdir, f"serve-{next(serial)}-{release}.log"))
        instances.append(instance)
        return instance

    def phase(label, seconds=STEADY, action=None):
        load.phase = label
        started = time.monotonic()
        if action:
            action()
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        phases.append((label, time.monotonic() - started))
        say(f"{label}: {time.monotonic() - started:.1f} s")

    def replace(old, release):
        fresh = [start(release), start(release)]
        for instance in fresh:
            balancer.join(instance)
        time.sleep(STEADY / 2)
        for instance in old:
            balancer.leave(instance)
        return fresh

    try:
        migrate(args.previous_binary, url, args.previous_migrations)
        serving = [start("old"), start("old")]
        for instance in serving:
            balancer.join(instance)
        load.start()
        phase("old release alone")
        migrate_seconds = []
        phase("during the new release's migrate", 0,
              lambda: migrate_seconds.append(migrate(args.binary, url, new_sql)))
        phase("old release after migrate")
        holder = {}
        phase("old and new side by side (a rolling update)", STEADY,
              lambda: holder.update(serving=replace(serving, "new")))
        serving = holder["serving"]
        phase("new release alone")
        phase("rollback: the old release again on the migrated database", STEADY * 1.5,
              lambda: holder.update(serving=replace(serving, "old")))
        serving = holder["serving"]
        phase("forward again: the new release replaces it", STEADY,
              lambda: holder.update(serving=replace(serving, "new")))
        serving = holder["serving"]
        phase("during and after the post-deployment migrate", STEADY,
              lambda: migrate_seconds.append(migrate(args.binary, url, new_sql, "--post-deployment")))
        load.stop()
        for instance in serving:
            balancer.leave(instance)
        checked, lost = read_back(args.binary, url, load.expected, os.path.join(workdir, "serve-read-back.log"))
    finally:
        load.stop()
        for instance in instances:
            instance.stop()
        # Its roles too (sql/0022): they belong to the cluster, and a dropped database's stay behind.
        roles = subprocess.run(["psql", url, "-X", "-A", "-t", "-q", "-c",
                                "SELECT quote_ident(poopypals_service_role()) || ', ' || quote_ident(poopypals_profiles_role())"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
        try:
            psql(args.database_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if roles:
                psql(args.database_url, f"DROP ROLE IF EXISTS {roles}")
        except HarnessError as failure:
            say(f"could not drop {name} and its roles: {failure}")

    if load.harness_errors:
        raise HarnessError("; ".join(load.harness_errors[:3]))
    rows, failures = [], []
    phases.insert(0, ("setup", 0.0))  # the phones' first registrations, before any phase began
    for label, seconds in phases:
        mine = [o for o in load.outcomes if o[0] == label]
        bad = [o for o in mine if o[4] is None or not (200 <= o[4] < 300) or o[7] > CLIENT_TIMEOUT]
        kinds = collections.Counter(f"{o[4]} {o[5] or ''}".strip() if o[4] is not None else f"ERR {o[6]}" for o in bad)
        by_release = collections.Counter(o[1] for o in mine)
        rows.append({"phase": label, "seconds": f"{seconds:.1f}", "answers": len(mine),
                     "releases": ", ".join(f"{k} {v}" for k, v in sorted(by_release.items())),
                     "failed": len(bad), "what": ", ".join(f"{k} ×{v}" for k, v in kinds.most_common(4)) or "-"})
        if bad:
            failures.append(f"{label}: {len(bad)} of {len(mine)} requests failed ({rows[-1]['what']})")
        if not mine and label != "setup":
            failures.append(f"{label}: no request was answered")
    failures += [f"read back by the new release: {p}" for p in lost]
    headers = [("phase", "phase"), ("seconds", "s"), ("answers", "answers"), ("releases", "answered by"),
               ("failed", "failed"), ("what", "failures")]
    failover.print_table(rows, headers)
    print(f"\nmigrate took {migrate_seconds[0]:.2f} s (pre-deployment) and {migrate_seconds[1]:.2f} s (post-deployment) "
          f"under load; {checked} acknowledged writes read back by the new release; "
          f"{sum(len(v) for v in load.expected.values())} logs on {len(load.expected)} devices")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previous-binary", required=True)
    parser.add_argument("--previous-migrations", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--migrations-dir", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--extra-migration")
    args = parser.parse_args()
    for path in (args.previous_binary, args.binary):
        if not os.access(path, os.X_OK):
            print(f"upgrade: error: {path} is not an executable", file=sys.stderr)
            return 2
    workdir = tempfile.mkdtemp(prefix=f"poopypals-upgrade-{os.getpid()}-")
    # SIGTERM (make test's `timeout 600`, a stopped CI) unwinds like an error: the `finally` blocks stop the
    # instances this drill started and drop its database, instead of leaving them running after it.
    def terminated(signum, _frame):
        raise HarnessError(f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, terminated)
    try:
        failures = run(args, workdir)
    except HarnessError as failure:
        print(f"upgrade: error: {failure} (logs in {workdir})", file=sys.stderr)
        return 2
    if failures:
        for failure in failures:
            print(f"upgrade: FAILED: {failure}", file=sys.stderr)
        print(f"upgrade: the instances' logs are in {workdir}", file=sys.stderr)
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    print("upgrade: passed: no failed request in any phase, nothing acknowledged lost", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
