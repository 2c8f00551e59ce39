"""What Spark's Python processes load: a reader's never load the sink or the acking writer."""

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
    # itself (Spark's planner workers) import these modules.
    loaded = _loaded_after("import spark_eventbus.group.stream_reader, spark_eventbus.source")
    assert "spark_eventbus.reads.partition_reader" in loaded
    assert not {m for m in loaded if m.startswith(WRITES)}


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
