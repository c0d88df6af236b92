"""`make test`'s metrics check (scripts/fuzz.sh): the live server's /metrics, read by Prometheus's own text parser
(prometheus-client), after schemathesis has sent it thousands of requests, most of them refused.

Fails, naming the metric, on: a family without HELP; a name outside the `poopypals_` prefix (process metrics keep
their conventional `process_`); a counter sample without `_total`; a histogram not named in seconds or without a
bucket below a millisecond; no request counted, or no 4xx counted as an error.
usage: check_metrics.py FILE
"""
import sys

from prometheus_client.parser import text_string_to_metric_families

problems = []
families = list(text_string_to_metric_families(open(sys.argv[1], encoding="utf-8").read()))
names = {family.name for family in families}
for family in families:
    if not family.documentation.strip():
        problems.append(f"{family.name}: no HELP")
    if not family.name.startswith(("poopypals_", "process_")):
        problems.append(f"{family.name}: not under the poopypals_ prefix")
    if family.type == "counter" and any(not s.name.endswith(("_total", "_created")) for s in family.samples):
        problems.append(f"{family.name}: a counter sample without _total")
    if family.type == "histogram":
        if not family.name.endswith("_seconds"):
            problems.append(f"{family.name}: a histogram not in seconds")
        bounds = {float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")}
        if bounds and min(bounds) >= 0.001:
            problems.append(f"{family.name}: no bucket below 1 ms")


def total(name, **labels):
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


requests, client_errors = total("poopypals_http_requests_total"), total("poopypals_http_request_errors_total", **{"class": "4xx"})
for required in ("poopypals_http_request_duration_seconds", "process_cpu_seconds", "process_resident_memory_bytes"):
    if required not in names:
        problems.append(f"{required}: missing")
if requests <= 0:
    problems.append("poopypals_http_requests_total: no request counted")
if client_errors <= 0:
    problems.append("poopypals_http_request_errors_total: no 4xx counted")
if problems:
    print("metrics: " + "\n metrics: ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"metrics: {len(families)} families, all with HELP and conventional names; {requests:.0f} requests, {client_errors:.0f} answered 4xx")
