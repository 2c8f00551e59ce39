"""The data source Spark sees as ``format("eventbus")``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .core.worker_gc import settle
from .errors import ConfigError
from .options.reader import parse_reader_options
from .options.value_schema import parse_value_schema
from .options.writer import SinkOptions, parse_sink_options
from .reads.schema import output_schema

if TYPE_CHECKING:  # the sink's modules load only when a write needs them (not in readers)
    from .writes.sink_schema import EncodingPlan


class EventBusDataSource(DataSource):
    """Redis Streams as a Spark data source.

    Reads: ``spark.readStream.format("eventbus")`` (consumer group, at-least-once, replayable
    batches) and ``spark.read.format("eventbus")`` (XRANGE of a stream). Writes:
    ``df.writeStream.format("eventbus")`` and ``df.write.format("eventbus")`` (XADD, idempotent
    per batch). Options are validated on the driver before any task runs.
    """

    @classmethod
    def name(cls) -> str:
        return "eventbus"

    def schema(self) -> StructType:
        # Called when the DataFrame is created (load()): validate what both modes share now,
        # so a bad option fails there. Mode-specific rules run in reader()/streamReader().
        settle()
        opts = parse_reader_options(self.options, streaming=False, warn=False)
        vs = parse_value_schema(opts.value_schema) if opts.value_schema else None
        return output_schema(vs, fields_binary=opts.fields_binary)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .reads.batch_reader import EventBusBatchReader, EventBusPushdownReader

        settle()
        opts = parse_reader_options(self.options, streaming=False)
        if opts.stream_pattern is not None:
            raise ConfigError("option 'streamPattern' is for streaming reads "
                              "(spark.readStream); a batch read (spark.read) names its streams "
                              "with option 'stream'.")
        return (EventBusPushdownReader if opts.filter_pushdown else EventBusBatchReader)(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .group.stream_reader import EventBusStreamReader, RefusedStreamReader

        settle()
        try:
            opts = parse_reader_options(self.options, streaming=True)
        except ConfigError as exc:  # at the query's first call, without Spark's noise after it
            return RefusedStreamReader(exc)
        if opts.group is None:  # positions in Spark's checkpoint, nothing written to Redis
            from .nogroup.position_reader import PositionStreamReader

            return PositionStreamReader(opts, schema)
        return EventBusStreamReader(opts, schema)

    def _sink(self, schema: StructType) -> tuple[SinkOptions, EncodingPlan]:
        """Driver side, before any task: options, schema rules, target keys and Redis."""
        from .writes.sink import check_targets
        from .writes.sink_schema import plan_encoding

        settle()
        opts = parse_sink_options(self.options)
        plan = plan_encoding(schema, stream_option=opts.stream)
        check_targets(opts)
        return opts, plan

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writes.sink import EventBusBatchWriter, refuse_overwrite

        if overwrite:
            raise refuse_overwrite()
        opts, plan = self._sink(schema)
        return EventBusBatchWriter(opts, plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # overwrite is True in outputMode("complete"): each trigger appends the whole result,
        # as Spark's Kafka sink does; a stream has nothing to truncate.
        from .writes.sink import EventBusStreamWriter

        opts, plan = self._sink(schema)
        return EventBusStreamWriter(opts, plan)
