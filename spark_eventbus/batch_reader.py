"""Driver side of batch reads: ``spark.read.format("eventbus")``, ``XRANGE startId..endId`` per
stream split by ID time into ``numPartitions`` ranges (even in time, not necessarily in count).
The executors read them with :func:`.partition_reader.read_range`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .ids import StreamId
from .options import ReaderOptions
from .partition_reader import read_range
from .partitions import RangePartition, ReadSpec
from .planning import split_id_range
from .redisio import stream_span


class EventBusBatchReader(DataSourceReader):
    """``spark.read.format("eventbus")``: no consumer group, nothing acked."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        conn = self.spec.conn
        parts: list[InputPartition] = []
        for stream in o.streams:
            span = stream_span(conn, stream, o.start_id.of(stream), o.end_id.of(stream),
                               "planning a batch read",
                               f"Server: {conn.display}. Choose another 'stream' option.")
            if span is None:
                continue
            lo, hi = StreamId.parse(span[0]), StreamId.parse(span[1])
            ranges = split_id_range(lo.ms, hi.ms, o.num_partitions)
            for i, (a, b) in enumerate(ranges):
                start = str(lo) if i == 0 else f"{a}-0"
                end = str(hi) if i == len(ranges) - 1 else f"{b}-{2**64 - 1}"
                parts.append(RangePartition(self.spec, stream, start, end))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)
