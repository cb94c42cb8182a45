# sparktrain: the two set-up commands of the README, and a few conveniences.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUM := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(SUM)
RUN_STAMP := $(VENV)/.service-$(SUM)

.PHONY: install run test lint fmt bench-quick clean

## Everything: the service, its tests, benchmarks and linters ('.[dev]').
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

## The service alone (no test or benchmark tools), unless everything is installed already.
$(RUN_STAMP): pyproject.toml
	test -f $(STAMP) || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q --upgrade pip && \
		$(BIN)/python -m pip install -q -e .; }
	rm -f $(VENV)/.service-* && touch $@

install: $(STAMP)

## Start the driver process on the embedded default: http://127.0.0.1:8000 (Swagger UI at /docs).
run: $(RUN_STAMP)
	$(BIN)/python -m app

## Lint, type-check, check the import contracts (lint-imports) and run every test (slow ones included; two pytest-xdist
## workers, each with its own SparkSession: docs/testing.md). Starts Redis and PostgreSQL when they are
## installed but stopped; SPARKTRAIN_REQUIRE_SERVICES=1 makes their absence fail the tests instead of skip them.
test: install
	scripts/services.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy && $(BIN)/lint-imports

fmt: install
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench-quick: install
	$(BIN)/python -m bench.service --quick
	$(BIN)/python -m bench.broker --quick

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
