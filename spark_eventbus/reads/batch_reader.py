"""Driver side of batch reads: ``spark.read.format("eventbus")``, ``XRANGE startId..endId`` per
stream split by ID time into ``numPartitions`` ranges (even in time, not necessarily in count).
The executors read them with :func:`.partition_reader.read_range`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from ..core.ids import StreamId
from ..core.planning import split_id_range
from ..options.reader import ReaderOptions
from ..redisio import stream_spans
from .partition_reader import read_range
from .partitions import RangePartition, ReadSpec
from .pushdown import Narrowing, narrowing

log = logging.getLogger("spark_eventbus")


class EventBusBatchReader(DataSourceReader):
    """``spark.read.format("eventbus")``: no consumer group, nothing acked."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)
        self.narrowing = Narrowing()  # what pushed filters leave to read (filterPushdown)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        conn = self.spec.conn
        parts: list[InputPartition] = []
        streams = [s for s in o.streams if self.narrowing.reads(s)]
        spans = stream_spans(conn, [(s, o.start_id.of(s), o.end_id.of(s)) for s in streams],
                             "planning a batch read",
                             f"Server: {conn.display}. Choose another 'stream' option.")
        for stream, span in zip(streams, spans, strict=True):
            if span is None:
                continue
            bounds = self.narrowing.bounds(StreamId.parse(span[0]), StreamId.parse(span[1]))
            if bounds is None:
                continue
            lo, hi = bounds
            ranges = split_id_range(lo.ms, hi.ms, o.num_partitions)
            for i, (a, b) in enumerate(ranges):
                start = str(lo) if i == 0 else f"{a}-0"
                end = str(hi) if i == len(ranges) - 1 else f"{b}-{2**64 - 1}"
                parts.append(RangePartition(self.spec, stream, start, end, str(hi)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            # no range to read (no stream, empty ranges, filters that keep nothing): Spark
            # plans one task anyway, with its own InputPartition(None)
            return iter(())
        return read_range(partition)


class EventBusPushdownReader(EventBusBatchReader):
    """A batch read with option ``filterPushdown``: filters on ``stream``, ``id`` and
    ``timestamp`` narrow the ``XRANGE`` ranges read (:mod:`.pushdown`). Spark calls
    ``pushFilters`` only with ``spark.sql.python.filterPushdown.enabled``, and refuses a reader
    that has it when that conf is off (``DATA_SOURCE_PUSHDOWN_DISABLED``): so it is a reader of
    its own, used only when the option asks for it."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.narrowing = narrowing(filters)
        if self.narrowing.narrows:
            log.info("spark-eventbus: filterPushdown: %s", self.narrowing)
        return filters  # all of them stay with Spark: the ranges read are a superset
