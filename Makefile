# Everything starts the project's own PostgreSQL (scripts/db.sh) unless DATABASE_URL is set.
SHELL := /bin/bash
SWIFT ?= swift
BIN := $(shell $(SWIFT) build --show-bin-path 2>/dev/null)/poopypals

.PHONY: run test bench build db-start db-stop db-reset migrate status

## make run: start PostgreSQL, apply migrations, serve the API in dev mode (prints curl examples)
run: build
	@scripts/run.sh "$(BIN)"

## make test: start PostgreSQL and PgBouncer, build, run every test
test:
	@url="$$(scripts/db.sh start)" && bouncer="$$(scripts/db.sh pgbouncer)" && \
	  export DATABASE_URL="$$url" PGBOUNCER_URL="$$bouncer" && \
	  $(SWIFT) test --disable-xctest

## make bench: our data layer and API beside pgbench on the same SQL (release build; updates bench/README.md)
bench:
	@scripts/bench.sh $(BENCH_ARGS)

build:
	@$(SWIFT) build

migrate: build
	@url="$$(scripts/db.sh start)" && export DATABASE_URL="$$url" && "$(BIN)" migrate

status: build
	@url="$$(scripts/db.sh start)" && export DATABASE_URL="$$url" && "$(BIN)" migrate status

db-start:
	@scripts/db.sh start

db-stop:
	@scripts/db.sh stop

## make db-reset: stop the throw-away PostgreSQL and delete its data
db-reset:
	@scripts/db.sh reset
