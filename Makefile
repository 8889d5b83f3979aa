# Every target bootstraps .venv from a bare python3 on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test docs lint typecheck prometheus rules unit browser postgres kernel bench soak clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cdnlake demo

# The documentation site (docs/, mkdocs-material) into site/; the tests build it --strict.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(STAMP)
	$(BIN)/mypy src

# Prometheus (Debian's package, installed when missing): promtool checks the alert rules,
# and the traffic test scrapes a daemon with a real Prometheus server.
prometheus:
	@{ command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing prometheus (prometheus, promtool) for the alert rules and the traffic test..."; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends prometheus) >/dev/null 2>&1 \
	      || echo "note: prometheus could not be installed; the traffic test will be skipped"; \
	  else echo "note: prometheus is missing; the traffic test will be skipped"; fi; }

# The alert rules, with promtool.
rules: prometheus
	@if command -v promtool >/dev/null 2>&1; then \
	  promtool check rules contrib/prometheus/alerts.yml && \
	  promtool test rules contrib/prometheus/alerts_test.yml contrib/prometheus/alerts_week_test.yml; \
	else echo "note: promtool is missing; the alert rules were not checked"; fi

# The report test renders the HTML page in headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the report test..."; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	      || echo "note: chromium could not be installed; the browser test will be skipped"; \
	  else echo "note: chromium is missing; the browser test will be skipped"; fi; }

# The fleet tests start a real PostgreSQL server (Debian's package: initdb, pg_ctl).
postgres:
	@{ command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql for the fleet tests..."; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1 \
	      || echo "note: postgresql could not be installed; the fleet tests will be skipped"; \
	  else echo "note: postgresql is missing; the fleet tests will be skipped"; fi; }

# The lake's own Delta log is read back by delta-kernel through DuckDB's delta extension
# (tests/lake/test_other_readers.py). The extension's pip package is built for one DuckDB,
# not the project's, so it gets a virtual environment of its own; the stamp names the
# versions, so changing them builds it again. Without it, that test is skipped.
KERNEL_VENV   := .venv-kernel
KERNEL_DUCKDB := 1.4.4
KERNEL_DELTA  := 1.4.4.20260205
KERNEL_STAMP  := $(KERNEL_VENV)/.installed-duckdb-$(KERNEL_DUCKDB)-delta-$(KERNEL_DELTA)

$(KERNEL_STAMP):
	@rm -rf $(KERNEL_VENV)
	@echo "installing DuckDB $(KERNEL_DUCKDB) and its delta extension into $(KERNEL_VENV)..."
	@if $(PYTHON) -m venv $(KERNEL_VENV) && $(KERNEL_VENV)/bin/python -m pip install --quiet \
	    duckdb==$(KERNEL_DUCKDB) duckdb-ext-delta==$(KERNEL_DELTA); then touch $@; \
	else rm -rf $(KERNEL_VENV); \
	  echo "note: DuckDB's delta extension could not be installed; the other-readers test will be skipped"; fi

kernel: $(KERNEL_STAMP)

# The suite in TEST_WORKERS pytest-xdist workers, each with its own servers on free ports.
# Most tests wait on sockets and subprocesses, so 4 workers beat 2 on 2 cores. Whole files
# go to one worker (their module fixtures are built once); tests/conftest.py starts the
# slowest files first. `make unit TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4

unit: $(STAMP) browser postgres kernel prometheus
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test: lint typecheck rules unit

clean:
	rm -rf $(VENV) $(KERNEL_VENV) site data/lake data/work data/reports

# The fault, crash and load suites at full size (20+ crash rounds, minutes of load).
soak: $(STAMP)
	SOAK=1 $(BIN)/pytest tests/reliability tests/ingest/test_crash_safety.py

# The daemon figures run the code before issue 47's door too, as their reference in the
# same run (BENCH_REFERENCE= for none).
BENCH_REFERENCE ?= f1b7654
bench: $(STAMP)
	$(BIN)/python tests/bench/bench.py $(if $(BENCH_REFERENCE),--reference $(BENCH_REFERENCE))
