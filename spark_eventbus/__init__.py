"""spark-eventbus: Redis Streams source and sink for PySpark Structured Streaming.

After ``pip install spark-eventbus``, ``spark.readStream.format("eventbus")`` works without
any call: Spark finds the ``pyspark_eventbus`` module. :func:`register` does the same
explicitly (e.g. when the package is only on ``sys.path`` through ``--py-files``), and makes
``df.write`` / ``writeStream.start()`` with ``format("eventbus")`` work in the thread that calls it
(a new Python thread needs it: docs/troubleshooting.md).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__
from .core.ids import StreamId
from .errors import (
    ConfigError,
    DataLossError,
    EntryDecodeError,
    EventBusConnectionError,
    EventBusError,
    NotAStreamError,
    RedisCommandError,
    ReplicasMissing,
    ReplicasShort,
    ReplicationError,
    UnwritableRowError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .source import EventBusDataSource
    from .writes.acking import AckingBatchWriter

# Loaded on first use: Spark's Python processes import this package to unpickle a reader or a
# writer, and a reader needs neither the acking writer nor the sink's encoder (which loads
# pandas), on the path to the first batch of every query (docs/performance.md).
_LAZY = {"AckingBatchWriter": ".writes.acking", "EventBusDataSource": ".source"}


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
    "EntryDecodeError",
    "EventBusConnectionError",
    "EventBusDataSource",
    "EventBusError",
    "NotAStreamError",
    "RedisCommandError",
    "ReplicasMissing",
    "ReplicasShort",
    "ReplicationError",
    "StreamId",
    "UnwritableRowError",
    "register",
]

_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()  # sessions register() has registered with
_REGISTERED_LOCK = threading.Lock()


def register(spark: SparkSession) -> None:
    """Register ``format("eventbus")`` with ``spark`` and make ``spark`` the active session of the
    calling thread (idempotent, cheap: call it at the start of every thread that writes).

    Runs on the driver, in the caller's thread. Spark looks a Python data source up, for
    ``df.write.format(...)`` and ``df.writeStream.format(...).start()``, through the *calling JVM
    thread's active session* (``DataSource.lookupDataSource``, DataSource.scala:702 in Spark
    4.3.0), not through the session the DataFrame belongs to. The thread that built the session has
    one; a new Python thread gets a new JVM thread (py4j's pinned-thread mode, the default) that
    has none, and there those calls fail with ``[DATA_SOURCE_NOT_FOUND] Failed to find the data
    source: eventbus`` although the package is installed. Calling this first in that thread (for
    a pool: ``ThreadPoolExecutor(initializer=register, initargs=(spark,))``) fixes it; see
    ``docs/troubleshooting.md``.

    On Spark Connect this only registers: the server sets the active session for every request
    itself, and the client has no JVM thread to set it on.
    """
    from .source import EventBusDataSource

    with _REGISTERED_LOCK:
        # once per session object: Spark logs a warning at every registration that replaces one
        # ("replaced a statically registered data source"), one per thread of a pool otherwise
        if spark not in _REGISTERED:
            spark.dataSource.register(EventBusDataSource)
            _REGISTERED.add(spark)
    _activate_in_this_thread(spark)


def _activate_in_this_thread(spark: SparkSession) -> None:
    """``SparkSession.setActiveSession(spark)`` in the JVM thread that py4j pins to the calling
    Python thread — what PySpark's own ``createDataFrame`` does (pyspark/sql/session.py).

    With ``PYSPARK_PIN_THREAD=false`` py4j hands each call to any pooled JVM thread, so no
    per-thread setting holds; Spark's default has been pinned threads since 3.2.
    """
    from pyspark.sql.session import SparkSession as ClassicSession

    if not isinstance(spark, ClassicSession):  # Spark Connect: no JVM in this process
        return
    jvm = spark._jvm
    assert jvm is not None, "a classic SparkSession always has a JVM gateway"
    ClassicSession._get_j_spark_session_class(jvm).setActiveSession(spark._jsparkSession)
