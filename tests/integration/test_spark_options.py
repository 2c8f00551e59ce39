"""The options Spark itself adds to a Python data source's options, observed on real Spark: each
is one that ``options.SPARK_OPTIONS`` accepts. That list was read off Spark's code; this test is
the check that fails when a Spark version passes another (which would break every query whose
surface adds it, as ``queryName`` broke the sink of every named streaming query)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from spark_eventbus.options.modes import SPARK_OPTIONS

pytestmark = pytest.mark.integration

USER = "recordto"  # the one option the test itself sets: where to record what arrived


def _record(options: Any) -> None:
    path = Path(options[USER])
    path.write_text(json.dumps(sorted(str(k).lower() for k in options)))


class _Reader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield ("x",)


class _Writer(DataSourceWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return WriterCommitMessage()


class _StreamWriter(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class OptionRecorder(DataSource):
    """Records the keys of the options it is given, in whichever process Spark asks it."""

    @classmethod
    def name(cls) -> str:
        return "eventbus_option_recorder"

    def schema(self) -> str:
        return "v string"

    def reader(self, schema: Any) -> DataSourceReader:
        _record(self.options)
        return _Reader()

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        _record(self.options)
        return _Writer()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        _record(self.options)
        return _StreamWriter()


def test_every_option_spark_adds_is_one_the_connector_accepts(spark, tmp_path):
    spark.dataSource.register(OptionRecorder)
    fmt = OptionRecorder.name()
    seen: dict[str, set[str]] = {}

    def added(what: str, run: Any) -> None:
        out = tmp_path / f"{uuid.uuid4().hex}.json"
        run(str(out))
        seen[what] = set(json.loads(out.read_text())) - {USER}

    added("read.load(path)", lambda f: spark.read.format(fmt).option(USER, f)
          .load(str(tmp_path / "p")).collect())
    added("read.load(paths)", lambda f: spark.read.format(fmt).option(USER, f)
          .load([str(tmp_path / "p1"), str(tmp_path / "p2")]).collect())
    added("write.save(path)", lambda f: spark.range(1).selectExpr("'x' AS v").write
          .format(fmt).option(USER, f).mode("append").save(str(tmp_path / "w")))

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"v": ["x"]}), src / "part.parquet")

    def stream(f: str) -> None:
        q = (spark.readStream.schema("v string").parquet(str(src)).writeStream.format(fmt)
             .option(USER, f).queryName(f"named_{uuid.uuid4().hex[:8]}")
             .option("checkpointLocation", str(tmp_path / f"chk-{uuid.uuid4().hex}"))
             .trigger(availableNow=True).start(str(tmp_path / "s")))
        assert q.awaitTermination(120)
        assert q.exception() is None, q.exception()

    added("writeStream.queryName().start(path)", stream)

    everything = set().union(*seen.values())
    # the test sees what it is about: each surface adds what Spark's code says it adds
    assert {"path", "paths", "queryname", "checkpointlocation"} <= everything, seen
    assert everything <= SPARK_OPTIONS, (
        f"Spark passes options spark-eventbus would refuse: {sorted(everything - SPARK_OPTIONS)} "
        f"(by surface: {seen}); add them to options.SPARK_OPTIONS with where Spark adds them")
