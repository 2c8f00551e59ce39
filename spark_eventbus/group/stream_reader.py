"""The Spark adapter of streaming reads: :class:`EventBusStreamReader` turns Spark's calls
(``initialOffset``, ``latestOffset``, ``reportLatestOffset``, ``partitions``, ``read``,
``commit``, ``stop``) into the driver's (:class:`.driver.ReaderDriver`, which decides *what a
batch contains* and records it in the offset) and the executors' (:mod:`.partition_reader`,
which replays exactly that). It holds no state of its own but the options and the driver.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..core.offsets import BatchOffset
from ..core.planning import pack_partitions
from ..options.reader import ReaderOptions
from ..reads.partitions import ReadSpec, SlicePartition
from ..redisio import ConsumerOps, probes
from .driver import ReaderDriver

log = logging.getLogger("spark_eventbus")

# Spark's driver-side process for a Python streaming source; the JVM ends it with SIGTERM.
_RUNNER = "python_streaming_source_runner.py"


class EventBusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader. Constructed cheaply (Spark builds it several times, also to pickle
    ``read`` into tasks); Redis is first touched by ``initialOffset``/``latestOffset``."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)
        self._driver: ReaderDriver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_driver"] = None
        return state

    @property
    def driver(self) -> ReaderDriver:
        """Connect, check key types and create groups: once, before any batch."""
        if self._driver is None:
            self._driver = ReaderDriver(self.options)
            _exit_cleanly_on_sigterm()
        return self._driver

    @property
    def ops(self) -> Mapping[str, ConsumerOps]:
        return self.driver.ops

    def initialOffset(self) -> dict:
        claims = self.driver.claims
        if claims.initial_run is None:
            claims.initial_run = uuid.uuid4().hex
        self.driver.lease.hold(claims.initial_run)
        return BatchOffset(claims.initial_run, 0, {}).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_entries_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        ops = self.ops
        self.driver.claimer.stop_at(dict(zip(
            ops, probes.last_generated_ids(list(ops.values())), strict=True)))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Plan the next batch (:meth:`.driver.ReaderDriver.plan`)."""
        return self.driver.plan(start, limit)

    def reportLatestOffset(self) -> dict | None:
        """Progress (:mod:`.progress`)."""
        return self.driver.progress()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        batch = self.driver.offset(end, exact=True)  # the same batch on every run of it
        if not batch.streams:  # the warm-up batch (latestOffset): tasks that read nothing
            return [SlicePartition(self.spec, (), batch.run, batch.seq)
                    for _ in range(self.options.num_partitions)]
        # Packed across streams: tasks follow numPartitions and the data, not the streams.
        return [SlicePartition(self.spec, slices, batch.run, batch.seq)
                for slices in pack_partitions(batch.streams, self.options.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # the decoder (pyarrow's compute functions) loads in the tasks, not in Spark's streaming
        # source runner, which plans batches and reads nothing
        from ..reads.partition_reader import read_slices

        assert isinstance(partition, SlicePartition)
        return read_slices(partition)

    def commit(self, end: dict) -> None:
        self.driver.commit(self.driver.offset(end))

    def stop(self) -> None:
        """The query stops. Give the consumer leases back (first: the JVM may kill this process
        soon), then stop the pre-claim after its current chunk. Entries pre-claimed for the
        next batch stay in this consumer's plan: the next start of the query (same checkpoint)
        delivers them first."""
        d = self._driver
        if d is None:
            return
        d.lease.release()
        try:
            d.prefetch.stop()
        except Exception as exc:  # the query is stopping: its pre-claim stays in the plan
            log.warning("spark-eventbus: the pre-claim failed while the query stopped: %s", exc)
        self._driver = None


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What ``streamReader`` returns for options that only a streaming read refuses (a missing
    ``group``): each call raises the option's error. Raised from ``streamReader`` itself, the
    error would reach the user behind Spark's own ``UnboundLocalError`` (its source runner's
    ``finally: reader.stop()`` has no reader then)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        raise self.error

    def reportLatestOffset(self) -> dict | None:
        raise self.error

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

    def commit(self, end: dict) -> None:
        raise self.error

    def stop(self) -> None:
        pass


def _exit_cleanly_on_sigterm() -> None:
    """In Spark's source-runner process only: turn the JVM's SIGTERM (how it stops the runner
    when the query stops) into SystemExit, so that the runner's ``finally: reader.stop()`` runs
    and the consumer leases are given back at once instead of expiring. Later SIGTERMs are
    ignored so that they cannot interrupt ``stop()``."""
    if (os.path.basename(sys.argv[0] if sys.argv else "") != _RUNNER
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return

    def on_term(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
