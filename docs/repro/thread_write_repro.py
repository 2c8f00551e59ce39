"""Minimal reproduction for Spark's tracker, no connector involved.

A Python data source registered with ``spark.dataSource.register`` is found by ``df.write`` and
``writeStream.start()`` on the thread that created the session, not from a second Python thread
(py4j pinned-thread mode, PySpark's default); reads from that thread work. Setting the JVM
thread's active session first makes the write work.

Run with PySpark >= 4.0 (tested on 4.3.0): ``python thread_write_repro.py``. Prints one line per
case; on 4.3.0::

    main thread, df.write:                   ok
    main thread, writeStream.start:          ok
    second thread, spark.read:               ok
    second thread, df.write:                 Py4JJavaError: org.apache.spark.SparkClassNotFoun
    dException: [DATA_SOURCE_NOT_FOUND] Failed to find the data source: nullsink. ...
    second thread, writeStream.start:        Py4JJavaError: (the same)
    second thread, setActiveSession + write: ok
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType


class NullWriter(DataSourceWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class NullStreamWriter(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class OneRowReader(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield (1,)


class NullSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nullsink"

    def schema(self) -> str:
        return "id BIGINT"

    def reader(self, schema: StructType) -> DataSourceReader:
        return OneRowReader()

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return NullWriter()

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return NullStreamWriter()


def in_thread(work: Callable[[], object]) -> str:
    """Run ``work`` on a new Python thread; return "ok" or the error's first line."""
    result: list[str] = []

    def target() -> None:
        try:
            work()
            result.append("ok")
        except Exception as exc:  # the point is to show the error
            java = getattr(exc, "java_exception", None)  # py4j's Py4JJavaError
            text = java.toString() if java is not None else str(exc)
            result.append(f"{type(exc).__name__}: {text.splitlines()[0]}")

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return result[0]


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this Python
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false") \
        .getOrCreate()
    spark.dataSource.register(NullSource)
    df = spark.range(3)  # built on the main thread

    def write() -> None:
        df.write.format("nullsink").mode("append").save()

    def start_stream() -> None:
        q = (spark.readStream.format("rate").load().writeStream.format("nullsink")
             .option("checkpointLocation", tempfile.mkdtemp()).start())
        q.stop()

    def read() -> None:
        spark.read.format("nullsink").load().collect()

    def write_after_set_active() -> None:
        jvm = spark._jvm
        assert jvm is not None
        jvm.org.apache.spark.sql.classic.SparkSession.setActiveSession(spark._jsparkSession)
        write()

    write()
    print("main thread, df.write:                   ok")
    start_stream()
    print("main thread, writeStream.start:          ok")
    print("second thread, spark.read:              ", in_thread(read))
    print("second thread, df.write:                ", in_thread(write))
    print("second thread, writeStream.start:       ", in_thread(start_stream))
    print("second thread, setActiveSession + write:", in_thread(write_after_set_active))
    spark.stop()


if __name__ == "__main__":
    main()
