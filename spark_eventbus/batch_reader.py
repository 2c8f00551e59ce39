"""Driver side of batch reads: ``spark.read.format("eventbus")``, ``XRANGE startId..endId`` per
stream split by ID time into ``numPartitions`` ranges (even in time, not necessarily in count).
The executors read them with :func:`.partition_reader.read_range`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .ids import StreamId
from .options import ReaderOptions
from .partition_reader import read_range
from .partitions import RangePartition, ReadSpec
from .planning import split_id_range
from .redisio import client, redis_errors, stream_exists


class EventBusBatchReader(DataSourceReader):
    """``spark.read.format("eventbus")``: no consumer group, nothing acked."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        conn = self.spec.conn
        r = client(conn)
        parts: list[InputPartition] = []
        with redis_errors("planning a batch read", conn):
            for stream in o.streams:
                if not stream_exists(r, stream, f"Server: {conn.display}. Choose another "
                                                "'stream' option."):
                    continue
                first: Any = r.xrange(stream, o.start_id, o.end_id, count=1)
                last: Any = r.xrevrange(stream, o.end_id, o.start_id, count=1)
                if not first:
                    continue
                lo = StreamId.parse(first[0][0])
                hi = StreamId.parse(last[0][0])
                ranges = split_id_range(lo.ms, hi.ms, o.num_partitions)
                for i, (a, b) in enumerate(ranges):
                    start = str(lo) if i == 0 else f"{a}-0"
                    end = str(hi) if i == len(ranges) - 1 else f"{b}-{2**64 - 1}"
                    parts.append(RangePartition(self.spec, stream, start, end))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)
