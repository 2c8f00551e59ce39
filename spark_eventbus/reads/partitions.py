"""What travels from the driver to the executors: one small picklable type per kind of task.

Spark pickles partitions (and the reader) into every task, so these hold primitives and frozen
dataclasses only; clients are made where the task runs (:func:`spark_eventbus.redisio.client`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..core.connection import ConnectionSpec
from ..core.planning import Slice
from ..core.positions import Piece
from ..options.reader import ReaderOptions


@dataclass(frozen=True)
class ReadSpec:
    """Everything an executor needs to read and decode entries (no offsets)."""

    conn: ConnectionSpec
    group: str | None
    consumer: str | None
    fields_binary: bool
    value_field: str
    value_schema: str | None
    fail_on_data_loss: bool
    ack_mode: str

    @classmethod
    def of(cls, opts: ReaderOptions) -> ReadSpec:
        return cls(opts.read_connection, opts.group,
                   opts.consumer_name if opts.group else None,
                   opts.fields_binary, opts.value_field, opts.value_schema,
                   opts.fail_on_data_loss, opts.ack_mode)


@dataclass(frozen=True)
class SlicePartition(InputPartition):
    """Streaming: one task's share of a micro-batch (claimed ranges and reclaimed IDs of one or
    more streams, :func:`.planning.pack_partitions`), and which batch it belongs to (the key of
    a loss record, :mod:`.redisio.losses`)."""

    spec: ReadSpec
    slices: tuple[Slice, ...]
    run: str = ""  # the checkpoint run of the batch's offset
    seq: int = -1  # the batch's number in that run

    def __repr__(self) -> str:
        names = [sl.stream for sl in self.slices]
        shown = ", ".join(repr(n) for n in names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (f"SlicePartition([{shown}], batch {self.seq}, "
                f"{sum(len(sl.chunks) for sl in self.slices)} ranges, "
                f"{sum(len(sl.reclaimed) for sl in self.slices)} reclaimed, "
                f"{sum(sl.count for sl in self.slices)} entries)")


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """Batch reads: ``XRANGE start end`` of one stream."""

    spec: ReadSpec
    stream: str
    start: str
    end: str
    hold: str = ""  # readFrom=replica: the last ID of the read, which the replica must hold

    def __repr__(self) -> str:
        return f"RangePartition({self.stream!r}, {self.start}..{self.end})"


@dataclass(frozen=True)
class PiecePartition(InputPartition):
    """Streaming without a group: one task's ranges (:func:`.positions.pack_pieces`)."""

    spec: ReadSpec
    pieces: tuple[Piece, ...]

    def __repr__(self) -> str:
        shown = "; ".join(str(p) for p in self.pieces[:3]) + (
            f" and {len(self.pieces) - 3} more" if len(self.pieces) > 3 else "")
        return f"PiecePartition([{shown}])"
