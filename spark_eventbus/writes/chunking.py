"""The sink's chunks (executor side): :class:`Chunker` cuts each target stream's runs into
chunks of a fixed number of rows and bytes, deterministically, so a retried task writes exactly
the same chunks (the unit of idempotency); a chunk then becomes what Redis takes, RESP
``XADD``s (:func:`xadd_commands`, encoded with :mod:`.resp`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import resp
from .encoding import Run


@dataclass
class WriteChunk:
    """``rows`` rows for ``stream``: the ``index``-th chunk of that stream in this task."""

    stream: str
    index: int
    runs: list[Run]
    rows: int


class Chunker:
    """Cuts each stream's rows into chunks of ``size`` rows and at most ``max_bytes`` bytes
    (a single larger row makes a chunk of its own); the last chunk of a stream is shorter.

    Chunk boundaries depend only on the sequence of rows per stream, never on how Spark sliced
    the input into Arrow batches, so a retried task recreates the same chunks.
    """

    def __init__(self, size: int, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self._pending: dict[str, list[Run]] = {}
        self._count: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._next: dict[str, int] = {}

    def add(self, stream: str, run: Run) -> Iterator[WriteChunk]:
        pending = self._pending.setdefault(stream, [])
        count, nbytes = self._count.get(stream, 0), self._bytes.get(stream, 0)
        while run.rows:
            cum = np.cumsum(run.sizes)
            fit = int(np.searchsorted(cum, self.max_bytes - nbytes, side="right"))
            take = min(run.rows, self.size - count, fit)
            if take == 0 and count:  # the next row would overflow the chunk's bytes
                yield self._emit(stream, pending, count)
                pending = self._pending[stream] = []
                count = nbytes = 0
                continue
            take = max(take, 1)  # a row larger than max_bytes travels alone
            head, run = run.split(take) if take < run.rows else (run, run.split(run.rows)[1])
            pending.append(head)
            count += take
            nbytes += int(cum[take - 1])
            if count == self.size or run.rows:
                yield self._emit(stream, pending, count)
                pending = self._pending[stream] = []
                count = nbytes = 0
        self._count[stream], self._bytes[stream] = count, nbytes

    def flush(self) -> Iterator[WriteChunk]:
        for stream, pending in self._pending.items():
            if pending:
                yield self._emit(stream, pending, self._count[stream])
        self._pending.clear()
        self._count.clear()
        self._bytes.clear()

    def _emit(self, stream: str, runs: list[Run], rows: int) -> WriteChunk:
        index = self._next.get(stream, 0)
        self._next[stream] = index + 1
        return WriteChunk(stream, index, list(runs), rows)


def _as_bytes(column: list[Any]) -> list[bytes]:
    return [v if v.__class__ is bytes else str(v).encode() for v in column]


_CRLF = pa.scalar(resp.CRLF, pa.binary())
_EMPTY = pa.scalar(b"", pa.binary())


def _arrow_xadds(fixed: bytes, names: tuple[str, ...], arrays: list[pa.Array]) -> bytes:
    """One ``XADD`` per row built by Arrow kernels: per field the name's bulk string, then
    ``$<length>``, CRLF, the value, CRLF; joined row-wise, the rows are back to back in the
    result's data buffer."""
    pieces: list[Any] = []
    before = fixed
    for name, arr in zip(names, arrays, strict=True):
        value = arr.cast(pa.binary())
        length = pc.cast(pc.binary_length(value), pa.string()).cast(pa.binary())
        pieces += [pa.scalar(before + resp.bulk(name.encode()) + b"$", pa.binary()), length,
                   _CRLF, value]
        before = resp.CRLF
    rows = pc.binary_join_element_wise(*pieces, _CRLF, _EMPTY)
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32)
    data = rows.buffers()[2]
    return data[int(offsets[rows.offset]):int(offsets[rows.offset + len(rows)])].to_pybytes()


def xadd_commands(chunk: WriteChunk) -> bytes:
    """The chunk's rows as ``XADD <stream> * <name> <value> ...`` commands in RESP, one per
    row, in order (what redis-py would send for each; the sink sends them in one
    ``MULTI``/``EXEC``). Runs that carry Arrow columns are encoded by Arrow kernels; the
    others (dead letters) with one ``%`` format per row, the fixed parts of a run's rows (the
    command, the stream, the field names) in the template once."""
    stream = chunk.stream.encode()
    out: list[bytes] = []
    for run in chunk.runs:
        k = len(run.names)
        fixed = resp.array_header(3 + 2 * k) + resp.bulks([b"XADD", stream, b"*"])
        if run.arrays is not None:
            out.append(_arrow_xadds(fixed, run.names, run.arrays))
            continue
        template = fixed.replace(b"%", b"%%") + b"".join(
            resp.bulk(name.encode()).replace(b"%", b"%%") + resp.BULK for name in run.names)
        flat: list[Any] = [None] * (2 * k * run.rows)
        for j, col in enumerate(run.columns):
            values = _as_bytes(col)
            flat[2 * j::2 * k] = [len(v) for v in values]
            flat[2 * j + 1::2 * k] = values
        if k == 1:
            out += [template % (flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        elif k == 2:
            out += [template % (flat[i], flat[i + 1], flat[i + 2], flat[i + 3])
                    for i in range(0, len(flat), 4)]
        else:
            step = 2 * k
            out += [template % tuple(flat[i:i + step]) for i in range(0, len(flat), step)]
    return b"".join(out)
