"""spark-eventbus: Redis Streams source and sink for PySpark Structured Streaming.

After ``pip install spark-eventbus``, ``spark.readStream.format("eventbus")`` works without
any call: Spark finds the ``pyspark_eventbus`` module. :func:`register` does the same
explicitly (e.g. when the package is only on ``sys.path`` through ``--py-files``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__
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

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .acking import AckingBatchWriter
    from .source import EventBusDataSource

# Loaded on first use: Spark's Python processes import this package to unpickle a reader or a
# writer, and a reader needs neither the acking writer nor the sink's encoder (which loads
# pandas), on the path to the first batch of every query (docs/performance.md).
_LAZY = {"AckingBatchWriter": ".acking", "EventBusDataSource": ".source"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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


def register(spark: SparkSession) -> None:
    """Register ``format("eventbus")`` with ``spark`` (idempotent)."""
    from .source import EventBusDataSource

    spark.dataSource.register(EventBusDataSource)
