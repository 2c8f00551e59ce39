"""Streaming reads without a consumer group (no ``group`` option), like Spark's Kafka source:
each stream's position lives in Spark's checkpoint (:mod:`.positions`), a batch is an ID range
per stream read with ``XRANGE``, and nothing is written to Redis, so a read-only ACL user is
enough (``eventbus acl-rule --role reader-without-group``).

:class:`PositionStreamReader` adapts Spark's calls; :class:`.planner.PositionPlanner` (driver)
decides where each batch ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..core.positions import (
    PositionOffset,
    batch_ranges,
    pack_pieces,
    split_ranges,
)
from ..options.reader import ReaderOptions
from ..reads.partitions import PiecePartition, ReadSpec
from .planner import PositionPlanner


class PositionStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("eventbus")`` without option ``group``. Constructed cheaply
    (Spark builds it several times, also to pickle ``read`` into tasks); Redis is first
    touched by ``latestOffset``."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)
        self._planner: PositionPlanner | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner"] = None
        return state

    @property
    def planner(self) -> PositionPlanner:
        if self._planner is None:
            self._planner = PositionPlanner(self.options)
        return self._planner

    def initialOffset(self) -> dict:
        # Where each stream starts is resolved by the first latestOffset and recorded in the
        # first batch's offset ("from"): Spark calls this again after a restart that finds no
        # committed batch, and it must answer the same.
        return PositionOffset().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_entries_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.stop_at_tails()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self.planner.plan(start, limit)

    def reportLatestOffset(self) -> dict | None:
        return self.planner.progress()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        first, last = PositionOffset.from_json(start), PositionOffset.from_json(end)
        pieces = split_ranges(batch_ranges(first, last), self.options.num_partitions,
                              last.whole)
        bins = pack_pieces(pieces, self.options.num_partitions)
        if not bins:  # an empty batch (the first plan): tasks that read nothing
            return [PiecePartition(self.spec, ()) for _ in range(self.options.num_partitions)]
        return [PiecePartition(self.spec, b) for b in bins]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # the decoder (pyarrow's compute functions) loads in the tasks, not in Spark's streaming
        # source runner, which plans batches and reads nothing
        from ..reads.partition_reader import read_pieces

        assert isinstance(partition, PiecePartition)
        return read_pieces(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: a read without a group keeps its positions in Spark's checkpoint
        only."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.join_ahead()
        self._planner = None
