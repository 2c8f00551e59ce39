"""``AckingBatchWriter``: the foreachBatch writer that acks what it handled and dead-letters
what it could not.

The writer object runs on the driver (Spark calls it once per micro-batch); acks and
dead-letter moves run on the executors, in chunks, through module-level functions that carry
only primitives — the batch is never collected to the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from .._version import __version__
from ..core.capabilities import DEAD_LETTER_SCRIPTS
from ..core.connection import ConnectionSpec
from ..errors import ConfigError, EventBusError, printable
from ..options.writer import parse_acking_options
from ..redisio import ack_entries, check_scripting, dead_letter_entries, preflight
from . import _portable

log = logging.getLogger("spark_eventbus")

Handler = Callable[[DataFrame, int], Any]
_REASON = "_eventbus_dlq_reason"


@dataclass(frozen=True)
class BatchReport:
    """What the last call did: rows handed to the handler, rows dead-lettered."""

    batch_id: int
    handled: int
    dead_lettered: int


class AckingBatchWriter:
    """Run ``handler`` on the good rows of each micro-batch, then ack them; dead-letter the rest.

    Use with a reader in ``ackMode=manual``::

        events.writeStream.foreachBatch(
            AckingBatchWriter(handle, url=url, group="billing", dead_letter_stream="orders:dlq"))

    Parameters
    ----------
    handler : callable
        ``handler(good_df, batch_id)``; if it raises, nothing of the batch is acked and the
        error propagates (Spark fails or retries the batch; its entries stay pending).
    options : mapping, optional
        Settings by the reader's option names (``{"url": ..., "group": ...,
        "deadLetterStream": ...}``): the reader's own options dict can be passed as it is
        (its options that do not apply here, such as ``stream``, are left out).
    is_valid : Column or str, optional
        Extra rule: rows for which it is not true are malformed too (e.g.
        ``"value.amount > 0"``).
    **settings
        The same settings as keyword arguments, by option name or in snake_case
        (``dead_letter_stream=``, ``deadLetterStream=``); they win over ``options``. Those that
        apply: ``group`` (required: the reader's consumer group), ``deadLetterStream`` (where
        malformed rows go, with ``dlq.reason``, ``dlq.source.stream``, ``dlq.source.id``,
        ``dlq.group``, ``dlq.delivery_count``; without it a malformed row fails the batch),
        ``ackBatchSize`` (IDs per XACK, 1 to 100,000; default 1,000), and every connection
        option of the reader (``url``, ``password``, ``tls*``, ``sentinel*``,
        ``failoverTimeoutMs``, ``passwordFile``, ``usernameFile``, ``credentialProvider``,
        ``waitReplicas``, ``waitTimeoutMs``, ``waitAof``: dead letters wait for that many
        replicas, and the AOF, before the batch goes on). Anything else fails, naming the
        closest option.

    Notes
    -----
    Malformed rows are those with a non-null ``error`` column (``valueSchema`` failures) or
    failing ``is_valid``; they never reach the handler. A replayed batch moves no entry twice:
    the move skips entries no longer pending. The move of a chunk (XADD to the dead-letter
    stream + XACK) is three idempotent steps with a marker per entry in the dead-letter
    stream's slot, on every layout (:mod:`spark_eventbus.redisio.deadletter`).
    """

    def __init__(self, handler: Handler, options: Mapping[str, Any] | None = None, *,
                 is_valid: Column | str | None = None, **settings: Any) -> None:
        if not callable(handler):
            raise ConfigError(f"handler {handler!r} is not callable: pass a function "
                              "handler(batch_df, batch_id).")
        opts = parse_acking_options(options or {}, settings)
        self.spec = opts.connection
        self.handler = handler
        self.group = opts.group
        self.dead_letter_stream = opts.dead_letter_stream
        self.ack_batch_size = opts.ack_batch_size
        self.is_valid = is_valid
        self.last_report: BatchReport | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Spark Connect pickles the foreachBatch function to the server: restored there through
        # a function pickled by value, a server without the package gets a clear error.
        return _portable.reducer(self, __version__)

    def __repr__(self) -> str:
        return (f"AckingBatchWriter(group={self.group!r}, dead_letter_stream="
                f"{self.dead_letter_stream!r}, url={self.spec.display!r})")

    def _reason(self, df: DataFrame) -> Column:
        """Why a row is malformed (NULL: it is not)."""
        reason = F.lit(None).cast("string")
        if self.is_valid is not None:
            rule = F.expr(self.is_valid) if isinstance(self.is_valid, str) else self.is_valid
            text = self.is_valid if isinstance(self.is_valid, str) else str(self.is_valid)
            reason = F.when(~F.coalesce(rule, F.lit(False)),
                            F.lit(f"is_valid rule failed: {text}"))
        if "error" in df.columns:
            reason = F.coalesce(F.col("error"), reason)
        return reason

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        missing = {"stream", "id"} - set(batch_df.columns)
        if missing:
            raise ConfigError(
                f"AckingBatchWriter needs the reader's columns; {sorted(missing)} are missing. "
                "Keep 'stream' and 'id' in the DataFrame passed to foreachBatch.")
        if self.dead_letter_stream is not None:
            # Before anything runs (once per process): wait_replicas / wait_aof, and Lua
            # (dead-lettering is scripts; acks alone are XACK and need none).
            preflight(self.spec)
            check_scripting(self.spec, "AckingBatchWriter with deadLetterStream",
                            DEAD_LETTER_SCRIPTS, "acking-writer")
        df = batch_df.withColumn(_REASON, self._reason(batch_df)).persist()
        try:
            bad = df.where(F.col(_REASON).isNotNull())
            good = df.where(F.col(_REASON).isNull()).drop(_REASON)
            n_bad = bad.count()
            if n_bad and self.dead_letter_stream is None:
                sample = bad.select("stream", "id", _REASON).limit(5).collect()
                shown = "; ".join(f"{r['stream']} {r['id']}: {r[_REASON]}" for r in sample)
                raise EventBusError(
                    f"batch {batch_id} has {n_bad} malformed rows and AckingBatchWriter has no "
                    f"deadLetterStream: {shown}. Nothing was acked or dropped; pass "
                    "dead_letter_stream='<stream>:dlq' to move such rows aside.")
            self.handler(good, batch_id)
            good.select("stream", "id").foreachPartition(
                partial(_ack_partition, self.spec, self.group, self.ack_batch_size))
            if n_bad:
                assert self.dead_letter_stream is not None
                counts = (F.col("delivery_count").cast("string")
                          if "delivery_count" in df.columns else F.lit(None).cast("string"))
                bad.select("stream", "id", F.col(_REASON).alias("reason"),
                           counts.alias("deliveries")).foreachPartition(
                    partial(_dead_letter_partition, self.spec, self.group,
                            self.dead_letter_stream, self.ack_batch_size))
                log.warning("spark-eventbus: batch %d: %d malformed rows moved to %r",
                            batch_id, n_bad, self.dead_letter_stream)
            self.last_report = BatchReport(batch_id, df.count() - n_bad, n_bad)
        finally:
            df.unpersist()


# ---------------------------------------------------------------------------------------------
# Executor side


def _chunks_per_stream(rows: Iterator[Row], size: int) -> Iterator[tuple[str, list[Row]]]:
    pending: dict[str, list[Row]] = {}
    for row in rows:
        bucket = pending.setdefault(row["stream"], [])
        bucket.append(row)
        if len(bucket) >= size:
            yield row["stream"], bucket
            pending[row["stream"]] = []
    for stream, bucket in pending.items():
        if bucket:
            yield stream, bucket


def _ack_partition(spec: ConnectionSpec, group: str, size: int, rows: Iterator[Row]) -> None:
    """Executor: XACK the partition's IDs, one call per ``size`` IDs per stream."""
    for stream, chunk in _chunks_per_stream(rows, size):
        ack_entries(spec, stream, group, [row["id"] for row in chunk], size,
                    "acking handled entries")


def _dead_letter_partition(spec: ConnectionSpec, group: str, dlq: str, size: int,
                           rows: Iterator[Row]) -> None:
    """Executor: move malformed entries to ``dlq`` and ack them, one Lua call per chunk."""
    for stream, chunk in _chunks_per_stream(rows, size):
        dead_letter_entries(spec, stream, dlq, group,
                            [(row["id"], printable(row["reason"]), row["deliveries"] or "")
                             for row in chunk])
