"""The data source Spark sees as ``format("eventbus")``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from .options import parse_reader_options
from .schema import output_schema, parse_value_schema


class EventBusDataSource(DataSource):
    """Redis Streams as a Spark data source.

    Reads: ``spark.readStream.format("eventbus")`` (consumer group, at-least-once, replayable
    batches) and ``spark.read.format("eventbus")`` (XRANGE of a stream). Options are validated
    on the driver when the DataFrame is created, before any task runs.
    """

    @classmethod
    def name(cls) -> str:
        return "eventbus"

    def schema(self) -> StructType:
        # Called when the DataFrame is created (load()): validate what both modes share now,
        # so a bad option fails there. Mode-specific rules run in reader()/streamReader().
        opts = parse_reader_options(self.options, streaming=False, warn=False)
        vs = parse_value_schema(opts.value_schema) if opts.value_schema else None
        return output_schema(vs, fields_binary=opts.fields_binary)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .reader import EventBusBatchReader

        return EventBusBatchReader(parse_reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .reader import EventBusStreamReader

        return EventBusStreamReader(parse_reader_options(self.options, streaming=True), schema)
