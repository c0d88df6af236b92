"""Schemathesis hooks for `make test`'s fuzzing step (scripts/fuzz.sh, loaded through SCHEMATHESIS_HOOKS).

They keep the fuzzer on the server's logic instead of its error paths, without relaxing any check:
- Timestamps and dates are drawn inside the windows the server enforces, which depend on the clock and so cannot
  be written in openapi.yaml's JSON Schema: a log's `occurredAt` from 1970-01-01T00:00:00Z to a day from now, a
  `dateOfBirth` from 1900-01-01 to today. Every value is in the grammar openapi.yaml states (pattern), with offsets,
  fractions of 0-9 digits and lower-case `t`/`z`, so positive data must be accepted: a 400 fails the run.
- Every call with a well-formed `X-Device-ID` runs as the run's registered device (the header is not passed
  with -H, which would also fill it in where a case leaves it out or malforms it on purpose).
- The two calls that end a device (`POST /v1/device/rotate`, `DELETE /v1/device`) get a device registered for
  that call alone: run on the shared device, the first success left every later call an unknown device (404/409).
- `GET|PATCH|DELETE /v1/logs/{id}` with a well-formed id find a log under that id: the id is created first (a
  replayed create changes nothing), so these calls reach the log rather than answering 404 to random ids. Not in
  the stateful phase, whose ids come from real creates and which checks that a deleted log stays deleted.
- Page cursors (`before`, `cursor`, and the `cursor` a push may carry) of valid cases are real ones (see CURSORS).
"""

import datetime
import json
import os
import urllib.error
import urllib.request
import uuid

import schemathesis
from hypothesis import strategies as st

API = os.environ["FUZZ_API"]
DEVICE = os.environ["FUZZ_DEVICE"]
UTC = datetime.timezone.utc


def _offsets():
    """Z (either case) or ±HH:MM within a day, as the server parses them."""
    numeric = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)
    return st.one_of(st.sampled_from(["Z", "z"]), numeric)


@st.composite
def _log_times(draw):
    # The window's upper end is a day after the moment the server checks; an hour of margin covers the run.
    now = datetime.datetime.now(UTC)
    instant = draw(st.datetimes(
        min_value=datetime.datetime(1970, 1, 1), max_value=(now + datetime.timedelta(hours=23)).replace(tzinfo=None),
    )).replace(tzinfo=UTC)
    offset = draw(_offsets())
    minutes = 0 if isinstance(offset, str) else offset
    local = instant.astimezone(datetime.timezone(datetime.timedelta(minutes=minutes)))
    digits = draw(st.integers(min_value=0, max_value=9))
    fraction = f"{local.microsecond:06d}{draw(st.integers(0, 999)):03d}"[:digits]
    if isinstance(offset, str):
        zone = offset
    else:
        sign = "+" if minutes >= 0 else "-"
        zone = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    separator = draw(st.sampled_from(["T", "t"]))
    return (f"{local:%Y-%m-%d}{separator}{local:%H:%M:%S}" + (f".{fraction}" if digits else "") + zone)


def _birth_dates():
    # "Today" is the server's (UTC); yesterday keeps a run across midnight valid.
    yesterday = datetime.datetime.now(UTC).date() - datetime.timedelta(days=1)
    return st.dates(min_value=datetime.date(1900, 1, 1), max_value=yesterday).map(lambda day: day.isoformat())


schemathesis.openapi.format("date-time", _log_times())
schemathesis.openapi.format("date", _birth_dates())


def _request(method, path, device, body=None):
    """The status and the JSON body of one call to the server under test."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, method=method)
    request.add_header("X-Device-ID", device)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None


# Page cursors are opaque: any string fits the schema, only the server's own are valid. In a case meant to be valid
# (positive) a generated cursor is swapped for a real one, so that paging is reached: kept, a phase whose few valid
# list calls all carried one counted as "the spec allows what the server refuses" (seen on GET /v1/logs and
# GET /v1/sync, now and then). Cases meant to be invalid keep theirs and still probe the cursor parser (a crafted
# cursor once crashed the server; the Swift tests pin crafted and forged cursors: craftedCursorsAreA400…).
CURSORS = {"GET /v1/logs": ("before", "/v1/logs?limit=1", "nextCursor"),
           "GET /v1/sync": ("cursor", "/v1/sync?limit=1", "cursor")}


def _is_positive(case):
    generation = getattr(case._meta, "generation", None) if case._meta is not None else None
    mode = getattr(generation, "mode", None)
    return getattr(mode, "value", mode) == "positive"


def _swap_cursor(case, label):
    name, path, field = CURSORS[label]
    query = case.query if case.query is not None else {}
    value = query.get(name)
    if not isinstance(value, str) or not _is_positive(case):
        return
    status, page = _request("GET", path, DEVICE)
    cursor = page.get(field) if status == 200 and isinstance(page, dict) else None
    if cursor is None:
        del query[name]
    else:
        query[name] = cursor


def _swap_push_cursor(case):
    """POST /v1/sync takes the puller's cursor in its body: a valid case gets a real one, as on the pulls."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("cursor"), str) or not _is_positive(case):
        return
    status, page = _request("GET", "/v1/sync?limit=1", DEVICE)
    cursor = page.get("cursor") if status == 200 and isinstance(page, dict) else None
    if cursor is None:
        del body["cursor"]
    else:
        body["cursor"] = cursor


def _canonical_uuid(value):
    """The UUID `value` spells in the hyphenated form the server takes, else None."""
    try:
        canonical = str(uuid.UUID(str(value)))
    except ValueError:
        return None
    return canonical if canonical == str(value).lower() else None


@schemathesis.hook
def before_call(context, case, kwargs):
    label = case.operation.label
    headers = case.headers if case.headers is not None else {}
    name = next((key for key in headers if key.lower() == "x-device-id"), None)
    if name is None or _canonical_uuid(headers[name]) is None:
        return  # no header, or a malformed one: the 401 is what is under test
    if label in ("POST /v1/device/rotate", "DELETE /v1/device"):
        fresh = str(uuid.uuid4())
        status, _ = _request("PUT", "/v1/device", fresh, {})
        assert status == 201, f"registering a device for {label} answered {status}"
        headers[name] = fresh
        return
    headers[name] = DEVICE
    # The stateful phase follows links from real creates, and checks that a deleted log stays deleted: no seeding.
    stateful = case._meta is not None and type(case._meta.phase.data).__name__ == "StatefulPhaseData"
    if label in CURSORS:
        _swap_cursor(case, label)
    if label == "POST /v1/sync":
        _swap_push_cursor(case)
    if not stateful and label in ("GET /v1/logs/{id}", "PATCH /v1/logs/{id}", "DELETE /v1/logs/{id}"):
        log_id = _canonical_uuid((case.path_parameters or {}).get("id"))
        if log_id is None:
            return  # a malformed id: the 400 is what is under test
        status, _ = _request("POST", "/v1/logs", DEVICE,
                          {"id": log_id, "occurredAt": "2026-01-01T00:00:00Z", "bristolType": 4})
        assert status in (200, 201, 409), f"creating a log for {label} answered {status}"
