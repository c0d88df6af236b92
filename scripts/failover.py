#!/usr/bin/env python3
"""Failover scenarios under bounded HTTP load through the real `poopypals serve` (Python 3 standard library only).

    scripts/failover.py --binary PATH [--scenario kill-primary|hang-primary|kill-standby|switchover|all]
                        [--pgbouncer | --pgbouncer-defaults] [--migrations-dir DIR] [--keep-cluster]

Each scenario: make sure the pg_auto_failover formation of scripts/cluster.sh is healthy (starting it if needed),
apply the migrations (directly, never through PgBouncer), start `PATH serve` on a free port with the multi-host URL
(or the PgBouncer one; with --pgbouncer-defaults PgBouncers with only the settings the README requires:
server_connect_timeout and query_wait_timeout at PgBouncer's defaults), register devices, run 6 threads of `POST /v1/logs` (client-chosen ids) with some
`GET /v1/logs` for 5 s, inject the fault, keep the load until writes have succeeded for 5 s in a row (60 s at most),
heal (SIGCONT, or restart the killed node), wait for the formation to be healthy again, then list every device's logs
through the API (a fresh `serve`) and compare with what was acknowledged.

Per scenario one table row on stdout; each scenario's timeline (outcomes per second around the fault) on stderr.
Exit 0 when every criterion holds, 1 when one fails (each named), 2 when the harness itself could not run.

Criteria: no acknowledged (2xx) write missing afterwards; no request longer than 20 s; every answer is 2xx or a 503
with Retry-After (another status, or a connection error to the service, fails); writes succeed again within 30 s of
a crash, hang or standby loss and 15 s of a switchover, and (with --pgbouncer-defaults) the outage itself, from the
first write that failed or stalled to that recovery, is at most 7 s; no write answered 503 `database_unavailable`, `timeout` or
`busy` (codes that promise nothing changed) is found committed. 503 `outcome_unknown` may be either way: counted.
No write is acknowledged by a primary with an empty synchronous_standby_names (a commit kept on it alone): `serve`
runs with POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY=1, and no 2xx write may fall within a window in which a node surely
took writes with no synchronous standby (sampled from the start of the load until the formation is healthy again);
the primary of before the fault may have no such window at all.

The cluster is stopped at the end when this script started it (unless --keep-cluster).
"""
import argparse
import collections
import http.client
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
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
SCENARIOS = ["kill-primary", "hang-primary", "kill-standby", "switchover"]
# A switchover's 15 s (was 10): writes are refused on the promoted node until it names its standbys
# (POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY), which measured 6.1-7.2 s to writing again (4.0-5.7 before).
RECOVERY_LIMIT = {"kill-primary": 30.0, "hang-primary": 30.0, "kill-standby": 30.0, "switchover": 15.0}
# With --pgbouncer-defaults: the longest a switchover may stop writes. 7 s since writes are refused on the promoted
# node until it names its standbys (POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY): measured 4.9 s (was 3.7 s without).
OUTAGE_LIMIT = 7.0
NOTHING_CHANGED = {"database_unavailable", "timeout", "busy"}  # 503 codes that promise the write did not happen

STEADY = 5.0          # seconds of load before the fault
STABLE = 5.0          # writes must have succeeded this long in a row after the fault
CAP = 60.0            # hard cap of load after the fault
CLIENT_TIMEOUT = 60.0
SLOW = 2.0            # a write slower than this counts as "not succeeding" (a stalled commit)
LONGEST_ALLOWED = 20.0
THREADS = 6
DEVICES = 4
PAUSE = 0.02          # between two requests of one thread: ~250 requests/s at most, the machine has 2 cores
MAX_REQUESTS = 30000  # per scenario


def say(message):
    print(f"failover: {message}", file=sys.stderr, flush=True)


class HarnessError(Exception):
    pass


def cluster(*args, timeout=120):
    """scripts/cluster.sh ARGS; its stdout, stripped. Raises HarnessError with its stderr on failure."""
    try:
        done = subprocess.run([CLUSTER, *args], capture_output=True, text=True, errors="replace",
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"scripts/cluster.sh {' '.join(args)} took more than {timeout} s")
    if done.returncode != 0:
        raise HarnessError(f"scripts/cluster.sh {' '.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout.strip()


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the service ---------------------------------------------------------------------------------------------------
class Service:
    """`BINARY serve` on free ports, stopped by PID: it prints `listening on http://127.0.0.1:PORT` and `metrics on
    http://HOST:PORT/metrics` on stdout (`port`, `metrics`). `environment` adds to its environment (scripts/readscale.py
    gives it a read pool)."""

    def __init__(self, binary, url, statement_cache_off, log_path, environment=None):
        env = dict(os.environ)
        # The formation's database outlives the scenarios, whose devices all register from 127.0.0.1: more than
        # the registration limit's bucket (sql/0015) over a few runs.
        # Every node of the formation has synchronous standbys: no write is acknowledged where one has none (the
        # second or two after a promotion, before the new primary names its standbys).
        env.update(DATABASE_URL=url, PORT="0", POOPYPALS_METRICS_PORT="0", POOPYPALS_REGISTRATION_BURST="100000",
                   POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY="1",
                   AUTH_JWT_SECRET="".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40)))
        if statement_cache_off:
            env["POOPYPALS_STATEMENT_CACHE"] = "off"
        env.update(environment or {})
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", "--metrics-port", "0"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=self.log, start_new_session=True)
        lines = queue.Queue()
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        deadline = time.monotonic() + 30
        self.port = self.metrics = None
        while self.port is None or self.metrics is None:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                missing = "where it listens" if self.port is None else "where its metrics are"
                raise HarnessError(f"serve did not say {missing} (log: {log_path})")
            try:
                line = lines.get(timeout=min(left, 0.5)).strip()
            except queue.Empty:
                continue
            match = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
            if match:
                self.port = int(match.group(1))
            match = re.match(r"metrics on http://([^/\s]+):(\d+)/metrics$", line)
            if match:
                host = match.group(1).strip("[]")
                self.metrics = ("127.0.0.1" if host in ("0.0.0.0", "::") else host, int(match.group(2)))

    def _drain(self, lines):
        for raw in self.proc.stdout:
            lines.put(raw.decode(errors="replace"))
            if not self.log.closed:
                self.log.write(b"[stdout] " + raw)
                self.log.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)  # serve exits within 10 s of SIGTERM
            except subprocess.TimeoutExpired:
                say(f"serve (pid {self.proc.pid}) did not stop within 15 s of SIGTERM; SIGKILL")
                self.proc.kill()
                self.proc.wait(timeout=5)
        if not self.log.closed:
            self.log.close()


# --- HTTP ----------------------------------------------------------------------------------------------------------
class Outcome:
    """One request: kind (write, read, register), monotonic start and end, status, error code, Retry-After, or the
    client-side error (refused, reset, client-timeout)."""

    def __init__(self, kind, start, device, log_id=None):
        self.kind, self.start, self.device, self.log_id = kind, start, device, log_id
        self.end = self.status = self.code = self.retry_after = self.error = None

    @property
    def duration(self):
        return self.end - self.start

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300

    @property
    def label(self):
        if self.error:
            return f"ERR {self.error}"
        if self.ok:
            return str(self.status)
        extra = "" if self.status != 503 or self.retry_after else " no-Retry-After"
        return f"{self.status} {self.code or '-'}{extra}"

    @property
    def acceptable(self):
        """2xx, or a 503 carrying Retry-After; nothing else (no other status, no connection error)."""
        return self.ok or (self.status == 503 and bool(self.retry_after))


def exchange(port, method, path, headers, body=None, timeout=CLIENT_TIMEOUT):
    """One request on a connection of its own (a stale keep-alive connection must not look like a failure).
    Returns (status or None, response headers or None, payload, error name or None, seconds); scripts/readscale.py
    uses it too."""
    headers = dict(headers)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.monotonic()
    status, response_headers, payload, error = None, None, b"", None
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        status, response_headers = response.status, response.headers
    except TimeoutError:
        error = "client-timeout"
    except ConnectionRefusedError:
        error = "refused"
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        error = "reset"
    except (OSError, http.client.HTTPException) as failure:
        error = type(failure).__name__
    finally:
        conn.close()
    return status, response_headers, payload, error, time.monotonic() - start


def decode_json(payload):
    """The JSON of a body, or None."""
    try:
        return json.loads(payload) if payload else None
    except ValueError:
        return None


def error_code(decoded):
    """The `error.code` of an error body, or None."""
    error = decoded.get("error") if isinstance(decoded, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def call(port, method, path, device, body=None, kind="read", log_id=None, timeout=CLIENT_TIMEOUT):
    """One request, recorded as an Outcome."""
    outcome = Outcome(kind, time.monotonic(), device, log_id)
    status, headers, payload, error, _ = exchange(port, method, path, {"X-Device-ID": device}, body, timeout)
    outcome.end = time.monotonic()
    outcome.status, outcome.error = status, error
    outcome.retry_after = headers.get("Retry-After") if headers is not None else None
    decoded = decode_json(payload) if status is not None else None
    if status is not None and status >= 400:
        outcome.code = error_code(decoded)
    return outcome, (decoded if outcome.ok else None)


class Load:
    """THREADS threads of writes (and every fifth request a read), bounded in count; stop() ends them."""

    def __init__(self, port, devices):
        self.port, self.devices = port, devices
        self.outcomes = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.inflight = [None] * THREADS
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(THREADS)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def _run(self, index):
        device = self.devices[index % len(self.devices)]
        n = 0
        while not self.stopping.is_set():
            with self.lock:
                if len(self.outcomes) >= MAX_REQUESTS:
                    return
            n += 1
            if n % 5 == 0:
                self.inflight[index] = ("read", time.monotonic())
                outcome, _ = call(self.port, "GET", "/v1/logs?limit=20", device, kind="read")
            else:
                log_id = str(uuid.uuid4())
                self.inflight[index] = ("write", time.monotonic())
                outcome, _ = call(self.port, "POST", "/v1/logs", device, kind="write", log_id=log_id,
                                  body={"id": log_id, "occurredAt": now_rfc3339(), "bristolType": random.randint(1, 7)})
            self.inflight[index] = None
            with self.lock:
                self.outcomes.append(outcome)
            time.sleep(PAUSE)

    def snapshot(self):
        with self.lock:
            return list(self.outcomes)

    def slow_write_in_flight(self):
        now = time.monotonic()
        return any(f is not None and f[0] == "write" and now - f[1] > SLOW for f in list(self.inflight))

    def stop(self, timeout):
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)


class SingleCopyWatch:
    """Samples every node that takes writes (scripts/cluster.sh primaries-sync) for an empty
    synchronous_standby_names: a primary acknowledging commits kept on it alone, gone if that node is lost then.
    pg_auto_failover does it (wait_primary) when a formation with number_sync_standbys 0 has no healthy standby: after
    a standby was lost (measured on the two-node formation: 6 s), and once during a switchover (the monitor took the
    standby being promoted for an unhealthy one; 1 717 acknowledged writes were rewound away). With two standbys
    (ANY 1) the one window left is pg_auto_failover's own after a promotion: the new primary leaves read-only in
    wait_primary and names its standbys only once one follows it (0.5 to 1 s in its logs here, ~3 s on a loaded
    machine: CI of stop 61, make test of the change that made this so). The primary of before the fault never; in
    a promoted node's window no write is acknowledged: `serve` refuses writes there
    (POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY, sql/0039), and a 2xx write whose request lies within the part of the
    window the samples saw (from the first sample that read it empty to the last, by the server's clock) fails the
    scenario. (Until then a promoted node's window was bounded in time, 3 s: a bound the machine's load decided.)

    Each node is sampled by a thread of its own, every 0.2 s at best (asked one after another, a hung old primary
    spaced every sample ~2.5 s apart; 2 s at most a sample: a hung node costs its own thread that, not the others').
    A window's edges come from the server, not from when a sample ran: a sample that answers carries the server's
    clock when it read the setting and the time it last loaded its configuration (scripts/cluster.sh primaries-sync).
    A window lasts at most from the read of the sample before it (when the node was not yet in it; for a sample the
    node did not answer as a writable primary, that sample's start) to the configuration load that ended it, as the
    sample after it reports (synchronous_standby_names changes only by a reload, which that sample's load time is or
    follows), or that sample's end when the node did not answer it so. (Edges taken from the samples' own times, the
    middle of the sample on each side, made a window pg_autoctl logged at ~1 s one of 3.0 s and more on a loaded
    machine: CI of stop 61 failed kill-primary so; the same run here, its node's log: read-only off at 51.492,
    synchronous_standby_names set at 52.541.)"""

    NODES = ("node1", "node2", "node3")

    def __init__(self, primary_before):
        self.primary_before = primary_before
        # name → [Sample]: began and ended (monotonic), single ("name:port" or None), and, when the node answered as
        # a writable primary, read (its clock at the read) and loaded (its last configuration load), as monotonic.
        self.samples = {name: [] for name in self.NODES}
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(name,), daemon=True) for name in self.NODES]

    Sample = collections.namedtuple("Sample", "began ended single read loaded")

    def start(self):
        for thread in self.threads:
            thread.start()

    def _run(self, name):
        while not self.stopping.is_set():
            began = time.monotonic()
            try:
                rows = cluster("primaries-sync", name, timeout=20)
            except HarnessError:
                rows = None
            if rows is not None:
                ended = time.monotonic()
                to_monotonic = ended - time.time()  # the server's clock is this machine's
                single = read = loaded = None
                for line in rows.splitlines():
                    node, port, now, load, value = (line.split(" ", 4) + [""] * 4)[:5]
                    if node != name:
                        continue
                    try:
                        read, loaded = float(now) + to_monotonic, float(load) + to_monotonic
                    except ValueError:
                        read = loaded = None
                    if value == "''":
                        single = f"{node}:{port}"
                self.samples[name].append(self.Sample(began, ended, single, read, loaded))
            self.stopping.wait(0.2)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            if thread.is_alive():
                thread.join(30)

    def windows(self, fault):
        """Every run of a node's samples that saw it empty: (node, start, end) in seconds from the fault, the longest
        the node can have been so (see the class)."""
        runs = []
        for samples in self.samples.values():
            count = len(samples)
            i = 0
            while i < count:
                if samples[i].single is None:
                    i += 1
                    continue
                j = i
                while j + 1 < count and samples[j + 1].single is not None:
                    j += 1
                if i > 0:
                    before = samples[i - 1]
                    start = before.read if before.read is not None else before.began
                else:
                    start = samples[i].began
                if j + 1 < count:
                    after = samples[j + 1]
                    end = after.loaded if after.loaded is not None else after.ended
                else:
                    end = samples[j].ended
                runs.append((samples[i].single, start - fault, end - fault))
                i = j + 1
        return sorted(runs, key=lambda run: run[1])

    def surely_single(self):
        """(node, first, last): from the first to the last read (monotonic, the server's clock) of each run of a node's
        samples that saw it empty: it took writes with no synchronous standby all that while."""
        runs = []
        for samples in self.samples.values():
            run = []
            for sample in samples + [None]:
                if sample is not None and sample.single is not None and sample.read is not None:
                    run.append(sample)
                    continue
                if len(run) >= 2:
                    runs.append((run[0].single, run[0].read, run[-1].read))
                run = []
        return runs

    def failure(self, fault, outcomes):
        bad = []
        for node, start, end in self.windows(fault):
            if node.endswith(f":{self.primary_before}"):
                bad.append(f"{node} at most {start:+.1f} s to {end:+.1f} s from the fault (the primary before it)")
        for node, first, last in self.surely_single():
            inside = [o for o in outcomes if o.kind == "write" and o.ok and first <= o.start and o.end <= last]
            if inside:
                bad.append(f"{len(inside)} writes acknowledged within {first - fault:+.1f} s to {last - fault:+.1f} s from "
                           f"the fault, while {node} had none")
        if not bad:
            return None
        return "a primary acknowledged commits with no synchronous standby (synchronous_standby_names ''): " + "; ".join(bad)

    def summary(self, fault):
        spans = [end - start for _, start, end in self.windows(fault)]
        return "-" if not spans else f"<{max(spans):.1f}"


def recovery(outcomes, fault):
    """When writes succeeded again: the end of the first quick 2xx write that started after the start of the last
    write that failed or stalled (ended after the fault). None while there is none."""
    writes = [o for o in outcomes if o.kind == "write" and o.end > fault]
    bad = failed_or_stalled(outcomes, fault)
    after = max((o.start for o in bad), default=float("-inf"))
    ends = [o.end for o in writes if o.ok and o.duration <= SLOW and o.start > after]
    return min(ends) if ends else None


def failed_or_stalled(outcomes, fault):
    """The writes that ended after the fault and failed or took longer than SLOW."""
    return [o for o in outcomes if o.kind == "write" and o.end > fault and (not o.ok or o.duration > SLOW)]


def outage_of(outcomes, fault, rec):
    """How long writes stopped: from the start of the first write that failed or stalled (ended after the fault) to
    the recovery. None when no write failed or stalled, or writes did not recover."""
    bad = failed_or_stalled(outcomes, fault)
    return None if rec is None or not bad else rec - min(o.start for o in bad)


# --- a scenario ----------------------------------------------------------------------------------------------------
class Scenario:
    def __init__(self, name, args, workdir):
        self.name, self.args, self.workdir = name, args, workdir
        self.failures = []
        self.row = None
        self.label = (" (pgbouncer defaults)" if args.pgbouncer_defaults else " (pgbouncer)" if args.pgbouncer else "")
        self.through = (" (through PgBouncers with their default timeouts)" if args.pgbouncer_defaults
                        else " (through PgBouncer)" if args.pgbouncer else "")

    def run(self):
        args = self.args
        started = time.monotonic()
        say(f"--- {self.name}{self.through}")
        cluster("start", timeout=240)
        cluster("wait-healthy", "90", timeout=100)
        direct = cluster("url")
        # Fresh PgBouncers for each scenario: they cache the in_hot_standby their node reported first and give it
        # to every login, so after an earlier scenario's failover libpq's read-write check would be fooled
        # (measured: psql through the PgBouncer URL lands on the standby). Each scenario measures its own fault.
        url = direct
        if args.pgbouncer:
            url = cluster("pgbouncer-restart", *(["defaults"] if args.pgbouncer_defaults else []))
        migrate(args.binary, direct, args.migrations_dir)

        service = Service(args.binary, url, args.pgbouncer, os.path.join(self.workdir, f"serve-{self.name}.log"))
        watch = self.watch = SingleCopyWatch(cluster("primary-port"))
        fault = time.monotonic()
        healed = True
        heal = None
        try:
            devices = [str(uuid.uuid4()) for _ in range(DEVICES)]
            refused = next(filter(None, (register(service.port, device) for device in devices)), None)
            if refused:  # the service cannot write even before the fault: a failed scenario, not a harness error
                self.failures.append(f"before the fault: {refused}")
                self.row = {"scenario": self.name + self.label, "acked": 0,
                            "lost": "-", "gap": "-", "outage": "-", "longest": "-", "during": "-", "unknown": "-", "errored": "-",
                            "single": "-", "result": "FAIL"}
                say(f"{self.name}: FAILED: {self.failures[0]}")
                return
            watch.start()
            load = Load(service.port, devices)
            load.start()
            time.sleep(STEADY)

            primary, secondary = cluster("primary-port"), cluster("secondary-port")
            fault_done = threading.Event()
            fault_error = []
            fault_command, heal = {
                "kill-primary": (("kill-node", primary), ("restart-node", primary)),
                "hang-primary": (("hang-node", primary), ("resume-node", primary)),
                "kill-standby": (("kill-node", secondary), ("restart-node", secondary)),
                "switchover": (None, None),
            }[self.name]
            healed = heal is None
            fault = time.monotonic()
            if fault_command:
                cluster(*fault_command)
                fault_done.set()
            else:  # switchover: runs (seconds) while the load goes on
                def switch():
                    try:
                        cluster("switchover", timeout=90)
                    except HarnessError as error:
                        fault_error.append(str(error))
                    fault_done.set()
                threading.Thread(target=switch, daemon=True).start()
            fault_end = None
            capped = False
            while True:
                now = time.monotonic()
                if fault_done.is_set() and fault_end is None:
                    fault_end = now
                if now - fault >= CAP:
                    capped = True
                    break
                rec = recovery(load.snapshot(), fault)
                if (rec is not None and fault_end is not None and not load.slow_write_in_flight()
                        and now - max(rec, fault_end) >= STABLE):
                    break
                time.sleep(0.2)
            load_end = time.monotonic()
            load.stopping.set()
            if heal:
                cluster(*heal, timeout=60)
                healed = True
            fault_done.wait(timeout=max(0.0, 95 - (time.monotonic() - fault)))
            if fault_error:
                raise HarnessError(fault_error[0])
            if not load.stop(timeout=CLIENT_TIMEOUT + 10):
                self.failures.append("load threads still waiting for answers 70 s after the load stopped")
        finally:
            if not healed:
                try:
                    cluster(*heal, timeout=60)
                except HarnessError as error:
                    say(str(error))
            service.stop()
        try:
            cluster("wait-healthy", "120", timeout=130)
        finally:
            watch.stop()
        single = watch.failure(fault, load.snapshot())
        if single:
            self.failures.append(single)

        outcomes = load.snapshot()
        committed = list_logs(args.binary, direct, devices, os.path.join(self.workdir, f"verify-{self.name}.log"))
        self.judge(outcomes, committed, fault, capped, load_end)
        self.timeline(outcomes, fault)
        say(f"{self.name}: {time.monotonic() - started:.0f} s (load {load_end - fault:.0f} s after the fault)")

    def judge(self, outcomes, committed, fault, capped, load_end):
        writes = [o for o in outcomes if o.kind == "write"]
        acked = [o for o in writes if o.ok]
        lost = [o for o in acked if o.log_id not in committed]
        rec = recovery(outcomes, fault)
        gap = None if rec is None else rec - fault
        longest = max(outcomes, key=lambda o: o.duration)
        during = collections.Counter(o.label for o in outcomes
                                     if not o.ok and o.start >= fault - 1 and (rec is None or o.start <= rec))
        unacceptable = collections.Counter(o.label for o in outcomes if not o.acceptable)
        broken_promises = [o for o in writes if o.status == 503 and o.code in NOTHING_CHANGED and o.log_id in committed]
        unknown = [o for o in writes if o.status == 503 and o.code == "outcome_unknown"]
        unknown_committed = sum(1 for o in unknown if o.log_id in committed)
        errored = [o for o in writes if o.error]
        errored_committed = sum(1 for o in errored if o.log_id in committed)

        if lost:
            self.failures.append(f"{len(lost)} acknowledged writes missing")
        if longest.duration > LONGEST_ALLOWED:
            self.failures.append(f"a request took {longest.duration:.1f} s (> {LONGEST_ALLOWED:.0f} s: {longest.kind}, "
                                 f"{longest.label})")
        if unacceptable:
            self.failures.append("answers other than 2xx or 503 with Retry-After: "
                                 + ", ".join(f"{label}×{n}" for label, n in unacceptable.most_common()))
        limit = RECOVERY_LIMIT[self.name]
        if gap is None:
            self.failures.append(f"writes did not succeed again within {CAP:.0f} s")
        elif gap > limit:
            self.failures.append(f"writes succeeded again after {gap:.1f} s (> {limit:.0f} s)")
        outage = outage_of(outcomes, fault, rec)
        if self.args.pgbouncer_defaults and outage is not None and outage > OUTAGE_LIMIT:
            self.failures.append(f"writes stopped for {outage:.1f} s (> {OUTAGE_LIMIT:.0f} s)")
        if broken_promises:
            codes = collections.Counter(o.code for o in broken_promises)
            self.failures.append("writes answered 503 " + ", ".join(f"{c}×{n}" for c, n in codes.items())
                                 + " are committed")
        self.row = {
            "scenario": self.name + self.label,
            "acked": len(acked), "lost": len(lost),
            "gap": "none" if gap is None else f"{gap:.1f}",
            "outage": "none" if gap is None else "0.0" if outage is None else f"{outage:.1f}",
            "longest": f"{longest.duration:.1f}",
            "during": ", ".join(f"{label}×{n}" for label, n in during.most_common()) or "-",
            "unknown": f"{unknown_committed}/{len(unknown)}",
            "errored": f"{errored_committed}/{len(errored)}",
            "single": self.watch.summary(fault),
            "result": "ok" if not self.failures else "FAIL",
        }

    def timeline(self, outcomes, fault):
        """Outcomes per second (by start time) around the fault, writes and reads apart, to stderr."""
        by_second = collections.defaultdict(lambda: (collections.Counter(), collections.Counter()))
        for o in outcomes:
            second = int((o.start - fault) // 1)
            if second >= -3:
                by_second[second][0 if o.kind == "write" else 1][o.label] += 1
        say(f"{self.name}: timeline (second from the fault by request start: writes | reads)")
        for second in sorted(by_second):
            writes, reads = by_second[second]
            fmt = lambda c: " ".join(f"{label}×{n}" for label, n in sorted(c.items())) or "-"
            print(f"  {second:+4d}  {fmt(writes)} | {fmt(reads)}", file=sys.stderr)
        slowest = sorted(outcomes, key=lambda o: o.duration, reverse=True)[:3]
        say(f"{self.name}: slowest requests: " + "; ".join(
            f"{o.kind} started {o.start - fault:+.1f} s took {o.duration:.1f} s: {o.label}" for o in slowest))
        for failure in self.failures:
            say(f"{self.name}: FAILED: {failure}")


def migrate(binary, url, migrations_dir):
    env = dict(os.environ, DATABASE_URL=url, POOPYPALS_MIGRATIONS_DIR=migrations_dir)
    for attempt in range(3):
        try:
            done = subprocess.run([binary, "migrate"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            raise HarnessError("migrate took more than 90 s")
        if done.returncode == 0:
            return
        time.sleep(2)
    raise HarnessError(f"migrate failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")


def register(port, device, deadline_seconds=20):
    """None when registered, else why not (after retrying for deadline_seconds)."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        outcome, _ = call(port, "PUT", "/v1/device", device, kind="register", timeout=10)
        if outcome.ok:
            return None
        if time.monotonic() > deadline:
            return f"PUT /v1/device answered {outcome.label} for {deadline_seconds} s"
        time.sleep(0.5)


def list_logs(binary, url, devices, log_path):
    """Every log id of the devices, read through the API of a fresh `serve` once the formation is healthy."""
    service = Service(binary, url, False, log_path)
    ids = set()
    try:
        for device in devices:
            cursor = None
            deadline = time.monotonic() + 60
            while True:
                path = "/v1/logs?limit=200" + (f"&before={cursor}" if cursor else "")
                outcome, page = call(service.port, "GET", path, device, timeout=20)
                if not outcome.ok:
                    if time.monotonic() > deadline:
                        raise HarnessError(f"listing logs after the scenario: GET /v1/logs answered {outcome.label}")
                    time.sleep(0.5)
                    continue
                ids.update(item["id"] for item in page["items"])
                cursor = page.get("nextCursor")
                if not cursor:
                    break
    finally:
        service.stop()
    return ids


SCENARIO_COLUMNS = [("scenario", "scenario"), ("acked", "acked writes"), ("lost", "lost"), ("gap", "gap s"),
                    ("outage", "outage s"), ("longest", "longest s"), ("unknown", "outcome_unknown committed"),
                    ("errored", "conn-error writes committed"), ("single", "one-copy s"), ("result", "result"),
                    ("during", "during the gap")]


def print_table(rows, headers=SCENARIO_COLUMNS):
    """One line per row, columns (key, title) aligned; scripts/backup_drill.py passes its own."""
    widths = [max(len(title), *(len(str(row[key])) for row in rows)) for key, title in headers]
    print("  ".join(title.ljust(width) for (_, title), width in zip(headers, widths)).rstrip())
    for row in rows:
        print("  ".join(str(row[key]).ljust(width) for (key, _), width in zip(headers, widths)).rstrip())


def parse_common_arguments(parser):
    """--binary, --migrations-dir and --keep-cluster, as this script and scripts/readscale.py take them; parses."""
    parser.add_argument("--binary", required=True, help="the poopypals executable")
    parser.add_argument("--migrations-dir", help="default: $POOPYPALS_MIGRATIONS_DIR, else sql/ beside the binary "
                                                 "if there is one, else the checkout's sql/")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the formation running at the end")
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        parser.error(f"{args.binary} is not an executable")
    if not args.migrations_dir:
        beside = os.path.join(os.path.dirname(args.binary), "sql")
        args.migrations_dir = os.environ.get("POOPYPALS_MIGRATIONS_DIR") or (
            beside if os.path.isdir(beside) else os.path.join(ROOT, "sql"))
    args.migrations_dir = os.path.abspath(args.migrations_dir)
    return args


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="all", choices=SCENARIOS + ["all"])
    parser.add_argument("--pgbouncer", action="store_true", help="serve through the PgBouncers")
    parser.add_argument("--pgbouncer-defaults", action="store_true",
                        help="serve through the PgBouncers with only the settings the README requires "
                             "(PgBouncer's default server_connect_timeout and query_wait_timeout); "
                             "writes may stop 5 s at most")
    args = parse_common_arguments(parser)
    args.pgbouncer = args.pgbouncer or args.pgbouncer_defaults

    workdir = os.path.join("/tmp", f"poopypals-failover-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    was_running = subprocess.run([CLUSTER, "status"], capture_output=True, timeout=30).returncode == 0
    rows, failed = [], []
    started = time.monotonic()
    try:
        for name in SCENARIOS if args.scenario == "all" else [args.scenario]:
            scenario = Scenario(name, args, workdir)
            scenario.run()
            rows.append(scenario.row)
            failed += [f"{scenario.row['scenario']}: {f}" for f in scenario.failures]
    except HarnessError as error:
        say(f"error: {error}")
        say(f"serve logs in {workdir}")
        return 2
    finally:
        if not was_running and not args.keep_cluster:
            subprocess.run([CLUSTER, "stop"], timeout=120)
    if failed:
        say(f"total {time.monotonic() - started:.0f} s; serve logs in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        say(f"total {time.monotonic() - started:.0f} s")
    print_table(rows)
    for failure in failed:
        print(f"FAILED {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
