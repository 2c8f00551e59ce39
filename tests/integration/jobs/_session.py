"""What the driver-process jobs share: the session and the eventbus source of the test."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

ROOT = Path(__file__).resolve().parents[3]


def session() -> Any:
    """A fresh driver's session. No register() here, nor in the jobs: their format("eventbus")
    resolves through the auto-registration hook (pyspark_eventbus.py), which the driver-kill
    test thereby covers too."""
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            # the quick JIT and the serial GC come with SPARK_SUBMIT_OPTS from the test that
            # starts this driver (tests/harness/jvm.py), as for every JVM the tests start
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
            .getOrCreate())


def events(spark: Any, url: str, stream: str, group: str, max_entries: str) -> Any:
    """The eventbus source; ``group`` empty: a read without a group; ``stream`` with a ``*``:
    a pattern (``streamPattern``)."""
    reader = (spark.readStream.format("eventbus").option("url", url)
              .option("streamPattern" if "*" in stream else "stream", stream)
              .option("startingPosition", "earliest")
              .option("maxEntriesPerTrigger", max_entries))
    return (reader.option("group", group) if group else reader).load()


def run(writer: Any, available_now: bool) -> None:
    """Start ``writer`` (a DataStreamWriter) and wait; exit non-zero if the query fails."""
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime="200 milliseconds"))
    q = writer.start()
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
