# Everything starts the project's own PostgreSQL (scripts/db.sh) unless DATABASE_URL is set.
SHELL := /bin/bash
SWIFT ?= swift
# Recursive (=): asked of SwiftPM only by the targets that use it, not for every target at parse time.
BIN = $(shell $(SWIFT) build --show-bin-path 2>/dev/null)/poopypals

.PHONY: help run test check fuzz bench build db-start db-stop db-reset migrate status schema

## make help: list the targets (from these ## lines)
help:
	@sed -n 's/^## make \([^:]*\): /  \1\t/p' $(MAKEFILE_LIST) | expand -t 14

## make run: start PostgreSQL, apply migrations, serve the API in dev mode (prints curl examples)
run: build
	@scripts/run.sh "$(BIN)"

## make test: start PostgreSQL 15 and 18 (each with PgBouncer), build once, run every test on each
## (with DATABASE_URL set: once, against it)
test:
	@SWIFT="$(SWIFT)" scripts/test.sh

## make check: the quick check for every commit: build, then the unit tests and the PostgreSQL 15 suite only
check:
	@SWIFT="$(SWIFT)" scripts/test.sh --quick

## make fuzz: schemathesis against a live server for FUZZ_MAX_TIME seconds (default 600; make test runs one pass)
fuzz: build
	@url="$$(scripts/db.sh start)" && FUZZ_MAX_TIME=$${FUZZ_MAX_TIME:-600} scripts/fuzz.sh "$$url" "$(BIN)"

## make bench: our data layer and API beside pgbench on the same SQL (release build; updates bench/README.md)
bench:
	@scripts/bench.sh $(BENCH_ARGS)

## make build: debug build of the service
build:
	@$(SWIFT) build

## make migrate: apply the migrations to the project's PostgreSQL (or DATABASE_URL)
migrate: build
	@url="$$(scripts/db.sh start)" && export DATABASE_URL="$$url" && "$(BIN)" migrate

## make schema: write docs/schema.sql, the schema the migrations leave (scripts/schema.sh check: is it current)
schema: build
	@POOPYPALS_BINARY="$(BIN)" scripts/schema.sh write

## make status: which migrations are applied
status: build
	@url="$$(scripts/db.sh start)" && export DATABASE_URL="$$url" && "$(BIN)" migrate status

## make db-start: start the project's throw-away PostgreSQL; print its URL
db-start:
	@scripts/db.sh start

## make db-stop: stop both throw-away servers (the system's and PostgreSQL 18)
db-stop:
	@scripts/db.sh stop; POOPYPALS_PG_VERSION=18 scripts/db.sh stop

## make db-reset: stop both throw-away servers and delete their data
db-reset:
	@scripts/db.sh reset; POOPYPALS_PG_VERSION=18 scripts/db.sh reset
