"""What Spark's Python processes load: a reader's never load the sink or the acking writer, and
Spark's planner processes load neither the decoder nor the encoder."""

from __future__ import annotations

import subprocess
import sys

WRITES = "spark_eventbus.writes."  # the sink and the acking writer: nothing a reader needs


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_a_reader_process_loads_no_sink_module():
    # Unpickling a streaming reader (Spark's source runner, executors) and the data source
    # itself (Spark's planner workers) import these modules. The decoder (pyarrow's compute
    # functions) loads only when a task reads.
    loaded = _loaded_after("import spark_eventbus.group.stream_reader, "
                           "spark_eventbus.nogroup.position_reader, spark_eventbus.source")
    assert {"spark_eventbus.group.driver", "spark_eventbus.nogroup.planner"} <= loaded
    assert not {m for m in loaded if m.startswith(WRITES)}
    assert not loaded & {"spark_eventbus.reads.decoding", "pyarrow.compute", "pandas"}


def test_spark_planner_processes_load_no_decoder_encoder_or_redis_client():
    # A planner process of Spark's asks the data source for its schema (create_data_source,
    # lookup_data_sources): no NumPy, pyarrow, pandas or redis-py (~0.3 CPU s each). One that
    # makes or commits a sink's writer (write_into_data_source, python_streaming_sink_runner)
    # talks to Redis but loads no encoder: no NumPy, pyarrow compute functions or the pandas
    # that pyarrow loads for its first scalar (~0.9 CPU s each).
    schema = _loaded_after("import pyspark_eventbus\n"
                           "pyspark_eventbus.DefaultSource({'stream': 's'}).schema()")
    assert "spark_eventbus.source" in schema
    assert not schema & {"numpy", "pyarrow", "pandas", "redis"}
    writer = _loaded_after("import spark_eventbus.source, spark_eventbus.writes.sink, "
                           "spark_eventbus.writes.sink_schema")
    assert {"redis", "spark_eventbus.writes.sink"} <= writer
    assert not writer & {"numpy", "pyarrow.compute", "pandas", "spark_eventbus.writes.encoding",
                         "spark_eventbus.writes.chunking"}


def test_the_package_still_exports_everything_on_first_use():
    loaded = _loaded_after(
        "import spark_eventbus as m\n"
        "assert m.AckingBatchWriter.__module__ == 'spark_eventbus.writes.acking'\n"
        "assert m.EventBusDataSource.name() == 'eventbus'\n"
        "from spark_eventbus import *\n"
        "assert AckingBatchWriter is m.AckingBatchWriter\n"
        "try:\n    m.nothing\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)")
    assert "spark_eventbus.writes.acking" in loaded


def test_parsing_options_loads_no_redis_client():
    # Options sit below the I/O layer: they describe a connection (spark_eventbus.core.connection)
    # and never load redis-py or the redisio layer.
    loaded = _loaded_after(
        "from spark_eventbus.options.reader import parse_reader_options\n"
        "from spark_eventbus.options.writer import parse_sink_options\n"
        "parse_reader_options({'stream': 's', 'group': 'g'}, streaming=True).connection\n"
        "parse_sink_options({'stream': 's'})")
    assert not {m for m in loaded
                if m == "redis" or m.startswith(("redis.", "spark_eventbus.redisio"))}
