"""spark-eventbus: Redis Streams source and sink for PySpark Structured Streaming.

After ``pip install spark-eventbus``, ``spark.readStream.format("eventbus")`` works without
any call: Spark finds the ``pyspark_eventbus`` module. :func:`register` does the same
explicitly (e.g. when the package is only on ``sys.path`` through ``--py-files``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .acking import AckingBatchWriter
from .errors import (
    ConfigError,
    DataLossError,
    EventBusConnectionError,
    EventBusError,
    NotAStreamError,
    RedisCommandError,
    UnwritableRowError,
)
from .ids import StreamId
from .source import EventBusDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "AckingBatchWriter",
    "ConfigError",
    "DataLossError",
    "EventBusConnectionError",
    "EventBusDataSource",
    "EventBusError",
    "NotAStreamError",
    "RedisCommandError",
    "StreamId",
    "UnwritableRowError",
    "register",
]
__version__ = "0.1.0"


def register(spark: SparkSession) -> None:
    """Register ``format("eventbus")`` with ``spark`` (idempotent)."""
    spark.dataSource.register(EventBusDataSource)
