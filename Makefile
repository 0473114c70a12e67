# make run   the whole stack on this machine: redis-server, database, admin user, console
# make test       system packages + venv + lint + the full test suite (its database tests also
#                 on PostgreSQL when TEST_POSTGRES_URL is set)
# make test-fast  the same less the slow, Spark and browser tests: about 2 minutes
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Test processes (pytest-xdist), for make test and make test-fast. Three on 2 cores: the tests
# wait on the processes they start (workers, servers, browsers, JVMs) more than they compute.
# The whole suite on SQLite, one sitting each (2026-11-29): 473 and 500 s with 3, 553, 592
# and 524 s with 2 (4: 458 s, its CPU then near full: 7.6 % idle); test-fast 118 s against
# 140 s. The PostgreSQL pass, CPU-bound, is the same either way (128.9 s with 3, 125.0 with 2).
# 0 runs the tests in this one process.
PYTEST_WORKERS ?= 3
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get

.PHONY: help venv install system-deps run test test-fast lint bytecode bench-quick clean

help:
	@echo "make run        start redis-server, migrate, admin user, console on http://127.0.0.1:8000/"
	@echo "make test       system packages, venv, lint (ruff, mypy), the whole test suite"
	@echo "make test-fast  the same without the slow, Spark and browser tests (about 2 min)"
	@echo "make lint       ruff check . and mypy"
	@echo "make bench-quick  the queue engine's hot path in under a minute: run before a change to it lands"
	@echo "make clean      caches, build files and collected static files (keeps var/ data, .venv)"

venv: $(PY)

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(STAMP)

# Reinstalls only when pyproject.toml changes (the stamp is newer otherwise).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# A class archive for the suite's Spark JVMs (core/pipeline/classes.py; tests/conftest.py
# hands it to them): each of the dozens the suite starts listens in about half the time.
# Made again with the packages (Spark's jars may have changed), beside lint, whose mypy keeps
# one core busy; without Java, a warning, and the tests' JVMs start without it.
CLASSES := $(VENV)/spark-classes.jsa
$(CLASSES): $(STAMP)
	@$(PY) manage.py sparkclasses --out $@ \
	  || echo "warning: no Spark class archive; the tests' Spark starts without it" >&2

# redis-server (and redis-cli) for the queue and the tests; a JDK for PySpark and for compiling
# the project's small Spark reader (core/pipeline/jvm); Chromium for the browser tests
# (Playwright drives Debian's build: never `playwright install`).
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
	  || missing="$$missing redis-server redis-tools"; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(APT) update && $(APT) install -y --no-install-recommends $$missing; \
	fi

# One plain command, so make runs the supervisor itself, with no shell in between. make passes
# SIGTERM on to it but not SIGINT (it leaves that to the terminal and waits): the supervisor
# watches make for a SIGINT (core/stack/supervisor.py, MakeParent), so `kill -INT <make>` stops it too.
# QA_REDIS_FSYNC=everysec trades the embedded Redis's durability for speed (docs/deployment.md: Durability).
run: system-deps install
	$(PY) manage.py runstack

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy

# The project's bytecode, written once before the tests: where PYTHONDONTWRITEBYTECODE is set
# (as in some CI sandboxes) each of the hundreds of processes the suite starts (workers,
# stacks, commands) would compile the modules it imports again, 0.05-0.1 s of CPU each.
# And pytest's own: each test process rewrites the test modules' asserts when it collects them
# (10 s of CPU for the whole suite, 6 processes in `make test`) and writes the result beside
# them only where PYTHONDONTWRITEBYTECODE is not set; written here once, every process reads
# it (collection 10 s -> 4 s). A module that does not collect is reported by the run itself.
bytecode: install
	@$(PY) -m compileall -q -j 0 core queueadmin tests bench manage.py > /dev/null
	@env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest --collect-only -q -p no:randomly \
	  > /dev/null 2>&1 || true

# pytest exits 5 when it collected no tests: that is a broken suite, not a pass.
define pytest
	@rc=0; $(PY) -m pytest -n $(PYTEST_WORKERS) $(1) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no tests: failing the build" >&2; exit 1; fi; \
	exit $$rc
endef

# Then the database tests (marked django_db) again on PostgreSQL when TEST_POSTGRES_URL names
# a server (.ci/run sets it): pytest-django creates a throwaway test database there and drops it.
# Less those that start Spark (marked spark by tests/conftest.py): their Spark side does not
# depend on the database.
define pytest_postgres
	@if [ -n "$$TEST_POSTGRES_URL" ]; then \
	  echo "database tests again on PostgreSQL"; \
	  rc=0; DATABASE_URL="$$TEST_POSTGRES_URL" $(PY) -m pytest -n $(PYTEST_WORKERS) -m "$(1)" \
	    $(PYTEST_ARGS) || rc=$$?; \
	  if [ $$rc -eq 5 ]; then \
	    if [ -n "$(strip $(PYTEST_ARGS))" ]; then echo "(no database tests in PYTEST_ARGS)"; exit 0; fi; \
	    echo "pytest ran no database tests: failing the build" >&2; exit 1; \
	  fi; \
	  exit $$rc; \
	fi
endef

test: system-deps install
	@$(MAKE) --no-print-directory -j2 lint bytecode $(CLASSES)
	$(call pytest,)
	$(call pytest_postgres,django_db and not spark)

# Spark and browser tests are marked slow too (tests/conftest.py marks them from their fixtures):
# named here as well, so that the target says what it leaves out.
FAST := not slow and not spark and not browser

test-fast: system-deps install lint bytecode
	$(call pytest,-m "$(FAST)")
	$(call pytest_postgres,django_db and $(FAST))

# The queue benchmark's check for a change to the hot path (core/queue/lua, consume.py, produce.py,
# core/worker): small counts, fsync everysec, under a minute. Compare its CPU and commands per
# task with the last figures in docs/performance.md (The queue engine: the quick check): unlike
# the rates, they hold when other processes share the machine.
bench-quick: install
	$(PY) bench/bench_queue.py --quick

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info var/static
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
	rm -f $(STAMP)
