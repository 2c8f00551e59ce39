"""Spark's own floor for ``make bench``: in-memory Python data sources with the reader's schema.

* :func:`register_floor` — ``format("floor")``: a streaming source that serves ``total`` rows
  of the reader's schema (``stream, id, timestamp, fields, delivery_count``, a ~200-byte
  ``payload`` field) from memory, in Arrow batches of 5,000 rows, with the same read limit and
  Trigger.AvailableNow support as the reader. What a query of it costs is Spark's Python data
  source path alone: the eventbus reader can only be slower.
* :func:`register_tick` — ``format("tick")``: one row per batch, for ever; into the ``noop``
  sink (which runs the read task) its batch interval is the latency floor of a streaming
  query with a Python source.

The classes are made inside the functions so that cloudpickle ships them by value to the
Python workers (the ``bench`` folder is not on their path).
"""

from __future__ import annotations

from typing import Any

READ_PAGE = 5_000


def register_floor(spark: Any, max_rows: int, partitions: int) -> None:
    """``format("floor").option("rows", N)``: N rows, ``max_rows`` per trigger by default."""
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    try:  # the revision measured: in rooms since issue 56
        from spark_eventbus.reads.decoding import output_schema
    except ModuleNotFoundError:
        from spark_eventbus.decoding import output_schema  # type: ignore[no-redef]

    schema = output_schema()

    class Range(InputPartition):
        def __init__(self, lo: int, hi: int) -> None:
            self.lo, self.hi = lo, hi

    def page(lo: int, n: int) -> pa.RecordBatch:
        filler = "x" * 120
        ids = [f"1700000000000-{i}" for i in range(lo, lo + n)]
        payloads = [f'{{"order_id": {i}, "customer": "c{i % 997}", "amount": {i % 500}.25, '
                    f'"note": "{filler}"}}' for i in range(lo, lo + n)]
        return pa.RecordBatch.from_arrays([
            pa.array(["bench:floor"] * n, pa.string()),
            pa.array(ids, pa.string()),
            pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
            pa.array([[("payload", p)] for p in payloads], pa.map_(pa.string(), pa.string())),
            pa.array([1] * n, pa.int32()),
        ], schema=pa.schema([pa.field("stream", pa.string(), False),
                             pa.field("id", pa.string(), False),
                             pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
                             pa.field("fields", pa.map_(pa.string(), pa.string()), False),
                             pa.field("delivery_count", pa.int32(), True)]))

    class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, total: int) -> None:
            self.total = total

        def initialOffset(self) -> dict:
            return {"pos": 0}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(max_rows)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            pos = start["pos"]
            n = self.total - pos
            if not isinstance(limit, ReadAllAvailable):
                n = min(n, limit.max_rows if isinstance(limit, ReadMaxRows) else max_rows)
            return {"pos": pos + n}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            lo, hi = start["pos"], end["pos"]
            step = -(-(hi - lo) // partitions) if hi > lo else 1
            return [Range(a, min(hi, a + step)) for a in range(lo, hi, step)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            assert isinstance(partition, Range)
            for a in range(partition.lo, partition.hi, READ_PAGE):
                yield page(a, min(READ_PAGE, partition.hi - a))

        def commit(self, end: dict) -> None:
            pass

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor"

        def schema(self) -> Any:
            return schema

        def simpleStreamReader(self, schema: Any) -> Any:
            raise NotImplementedError

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return FloorReader(int(self.options["rows"]))

    spark.dataSource.register(Floor)


def register_tick(spark: Any) -> None:
    from collections.abc import Iterator

    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class TickReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self, start: dict, limit: Any) -> dict:
            return {"n": start["n"] + 1}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition(end["n"])]

        def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
            yield (partition.value,)

        def commit(self, end: dict) -> None:
            pass

    class Tick(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tick"

        def schema(self) -> str:
            return "n bigint"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return TickReader()

    spark.dataSource.register(Tick)
