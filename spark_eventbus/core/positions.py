"""Streaming reads without a consumer group (no ``group`` option): positions in Spark's
checkpoint, nothing written to Redis. Pure (no Redis, no Spark): the offset, where a stream
starts, where a batch ends, and how a batch splits into tasks; unit-tested alone
(``tests/unit/test_positions.py``). The Redis side is :mod:`.redisio.tails`, the Spark side
:mod:`.position_reader`.

An offset lists every stream's **position**: the ID the next batch reads after, and the
stream's ``entries-added`` count at that ID where it is known (the ``entries-read`` of Redis's
own consumer groups)::

    {"v": 1, "kind": "positions", "streams": {"orders": "1700-3 42", "refunds": "1650-0"},
     "from": {"refunds": "0-0 0"}}

``from`` holds where the streams that joined in this batch start (``startingPosition``
resolved once, when the stream was first seen; ``0-0`` for a stream deleted and created again
under the query), so a batch is fully described by its two offsets: for each stream,
``(start, end]`` — and replays read exactly that, since no entry can be added at or below a
stream's last ID.

The count makes losses visible without writing anything: between two positions whose counts
are known, ``end.added - start.added`` entries were added; a task that reads fewer found
entries deleted or trimmed before it read them (``failOnDataLoss``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventBusError
from .ids import StreamId
from .packing import PACK_FROM, pack, unpack
from .planning import split_id_range

VERSION = 1
PACKED = 2  # the packed form (.packing), from PACK_FROM streams on
KIND = "positions"
_LAST_SEQ = 2**64 - 1
# A stream's range is split over several tasks from this many entries on.
MIN_SPLIT = 5_000


@dataclass(frozen=True)
class Position:
    """Where a stream's next read starts (after ``id``), with the stream's ``entries-added``
    count at ``id`` when known."""

    id: str
    added: int | None = None

    def to_text(self) -> str:
        return self.id if self.added is None else f"{self.id} {self.added}"

    @classmethod
    def from_text(cls, text: str) -> Position:
        entry_id, _, added = text.partition(" ")
        return cls(entry_id, int(added) if added else None)


@dataclass(frozen=True)
class Tail:
    """What ``XINFO STREAM`` says of a stream's end (:func:`.redisio.tails.tails`)."""

    last_id: str  # last-generated-id
    added: int  # entries-added
    length: int
    first_id: str | None  # the first entry's ID (None: empty)
    max_deleted: str  # max-deleted-entry-id: "0-0" when nothing was ever deleted or trimmed

    @property
    def end(self) -> Position:
        """The stream's last ID, with its count."""
        return Position(self.last_id, self.added)

    def holes_after(self, position: str) -> bool:
        """Whether an entry after ``position`` was ever deleted or trimmed."""
        return StreamId.parse(self.max_deleted) > StreamId.parse(position)

    @property
    def contiguous(self) -> bool:
        """Whether the entries it holds are every entry added since its first one: nothing
        deleted inside (only trimmed from the head), so counts follow positions."""
        return self.first_id is None \
            or StreamId.parse(self.max_deleted) < StreamId.parse(self.first_id)


@dataclass(frozen=True)
class PositionOffset:
    """The end offset of a batch of a read without a group (and the next batch's start)."""

    streams: Mapping[str, Position] = field(default_factory=dict)
    joined: Mapping[str, Position] = field(default_factory=dict)  # "from": where they started
    # streams whose range in this batch is read by one task: entries after its start were
    # deleted before it was planned, and only the whole range's count says how many it lost
    whole: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """Written out (``v`` 1, readable) up to :data:`PACK_FROM` streams, packed above
        (``v`` 2, :mod:`.packing`) unless an ID cannot be."""
        if len(self.streams) + len(self.joined) >= PACK_FROM:
            packed = pack([self.streams, self.joined], sorted(self.whole))
            if packed is not None:
                return {"v": PACKED, "kind": KIND, "count": len(self.streams),
                        "packed": packed}
        out: dict[str, Any] = {"v": VERSION, "kind": KIND, "streams": {
            name: self.streams[name].to_text() for name in sorted(self.streams)}}
        if self.joined:
            out["from"] = {name: self.joined[name].to_text() for name in sorted(self.joined)}
        if self.whole:
            out["whole"] = sorted(self.whole)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PositionOffset:
        if data.get("kind") == KIND and data.get("v") == PACKED:
            return _unpacked(str(data["packed"]))
        if data.get("kind") != KIND or data.get("v") != VERSION:
            raise EventBusError(
                f"checkpoint offset {dict(data)!r} was not written by a spark-eventbus read "
                "without a consumer group (option 'group' not given): a checkpoint belongs to "
                "one way of reading. Start the query with a new checkpointLocation, or give it "
                "the options it was started with.")
        return cls({n: Position.from_text(p) for n, p in data.get("streams", {}).items()},
                   {n: Position.from_text(p) for n, p in data.get("from", {}).items()},
                   frozenset(data.get("whole", ())))


@functools.lru_cache(maxsize=2)
def _unpacked(text: str) -> PositionOffset:
    """A packed offset, by its text: the last two are kept (a batch's start and end, each read
    3-5 times by latestOffset and partitions; ~0.25 s to unpack at 100,000 streams). Shared,
    so read-only, as every offset read here is."""
    (streams, joined), whole = unpack(text, 2, Position)
    return PositionOffset(streams, joined, frozenset(whole))


def starting_position(position: str, tail: Tail | None) -> Position:
    """Where a stream starts, for a parsed ``startingPosition`` (``latest``/``$``,
    ``earliest``/``0``, or an ID to start after) and the stream's tail (None: no such stream).

    ``earliest`` starts just before the first entry still held, counting as if the entries it
    holds were all those added since (entries deleted before the query started are not its
    losses); an ID before the first entry likewise; an ID inside the stream starts with an
    unknown count, known again once a batch reaches the stream's end."""
    if tail is None:
        if position in ("latest", "$", "earliest", "0"):
            return Position("0-0", 0)
        return Position(position, None)
    if position in ("latest", "$"):
        return tail.end
    before_all = Position(
        str(StreamId.parse(tail.first_id).prev()) if tail.first_id else tail.last_id,
        tail.added - tail.length)
    if position in ("earliest", "0"):
        return before_all
    at = StreamId.parse(position)
    if at >= StreamId.parse(tail.last_id):
        return Position(position, tail.added)
    if tail.first_id is None or at < StreamId.parse(tail.first_id):
        return Position(position, before_all.added)
    return Position(position, None)


@dataclass(frozen=True)
class Step:
    """What the planner decided for one stream: where the batch ends, and how many entries
    it holds (None: not known)."""

    end: Position
    expected: int | None


def to_tail(start: Position, bound: Position) -> Step:
    """The batch reads the stream up to ``bound`` (its last ID, with the count there)."""
    return Step(bound, behind(start, bound))


def after_read(start: Position, tail: Tail, bound: Position, ids: Sequence[str],
               reached: bool) -> Step:
    """The batch ends at the last of ``ids`` (the entries a driver-side ``XRANGE`` found after
    ``start``, up to ``bound``), or at ``bound`` when the read ``reached`` it.

    The count at the end is known where no entry after ``start`` was ever deleted (the count
    grows by one per entry), or where the stream holds every entry since its first one and
    ``start`` is before it (trimmed past: the entries trimmed after ``start`` are counted as
    expected, so the task that reads the range reports them lost)."""
    if reached:
        return to_tail(start, bound)
    end_id = ids[-1]
    if start.added is None:
        return Step(Position(end_id, None), None)
    if not tail.holes_after(start.id):
        return Step(Position(end_id, start.added + len(ids)), len(ids))
    if tail.contiguous and tail.first_id is not None \
            and StreamId.parse(start.id) < StreamId.parse(tail.first_id):
        added = tail.added - tail.length + len(ids)
        return Step(Position(end_id, added), added - start.added)
    return Step(Position(end_id, None), None)


def behind(start: Position, bound: Position | None) -> int | None:
    """Entries added after ``start`` up to ``bound`` (a stream's end, :attr:`Tail.end`; None:
    no stream): the most a batch to there holds (None: not known)."""
    if bound is None or StreamId.parse(bound.id) <= StreamId.parse(start.id):
        return 0
    if start.added is None or bound.added is None or bound.added < start.added:
        return None
    return bound.added - start.added


@dataclass(frozen=True)
class Piece:
    """One task's range of one stream: the entries after ``after`` up to ``last``
    (inclusive), ``expected`` of them when known (the whole range of a stream in one batch;
    a range split in time has no count per piece)."""

    stream: str
    after: str
    last: str
    expected: int | None
    weight: int  # for packing pieces into tasks
    # the first piece of a range split in time: the counts at the range's start and end and
    # its last ID, so that its task counts the entries trimmed from the stream's head before
    # they were read (the other pieces have no count of their own)
    whole_range: tuple[int, int, str] | None = None

    def __str__(self) -> str:
        return f"{self.stream} ({self.after}, {self.last}]"


def batch_ranges(start: PositionOffset, end: PositionOffset
                 ) -> list[tuple[str, Position, Position]]:
    """Each stream's ``(start, end)`` in the batch between two offsets (a stream in the end's
    ``from`` starts there), streams in name order; streams with nothing to read are left out."""
    out = []
    for name in sorted(end.streams):
        to = end.streams[name]
        # "from" first: a stream that joined, or was created again under the query, starts there
        begin = end.joined.get(name) or start.streams.get(name)
        if begin is None or StreamId.parse(to.id) <= StreamId.parse(begin.id):
            continue
        out.append((name, begin, to))
    return out


def split_ranges(ranges: Sequence[tuple[str, Position, Position]], num_partitions: int,
                 single: frozenset[str] = frozenset()) -> list[Piece]:
    """Pieces of the batch's ranges: a stream's range in one piece with its count, or, with
    fewer streams than ``num_partitions``, a range of at least :data:`MIN_SPLIT` entries split
    in time into several, without a count each (``single``: streams whose range stays whole,
    so that the one task reading it checks the count)."""
    parts = max(1, math.ceil(num_partitions / max(1, len(ranges))))
    out: list[Piece] = []
    for name, begin, to in ranges:
        expected = None if begin.added is None or to.added is None else to.added - begin.added
        weight = expected if expected is not None else _span_weight(begin.id, to.id)
        lo, hi = StreamId.parse(begin.id), StreamId.parse(to.id)
        if parts == 1 or name in single or expected is None or expected < MIN_SPLIT \
                or hi.ms == lo.ms:
            out.append(Piece(name, begin.id, to.id, expected, max(1, weight)))
            continue
        spans = split_id_range(lo.ms, hi.ms, parts)
        after = begin.id
        counts = (begin.added, to.added, to.id) if begin.added is not None \
            and to.added is not None else None
        for i, (_, b) in enumerate(spans):
            last = to.id if i == len(spans) - 1 else f"{b}-{_LAST_SEQ}"
            if StreamId.parse(last) > StreamId.parse(after):
                out.append(Piece(name, after, last, None, max(1, weight // len(spans)),
                                 counts if after == begin.id else None))
            after = last
    return out


def trimmed_in(piece: Piece, tail: Tail | None) -> int:
    """Entries of ``piece``'s whole range trimmed from the stream's head (as ``tail`` shows
    it, after the piece was read), where that can be counted: the range's counts are known
    and the stream holds every entry since its first one (nothing deleted inside)."""
    if piece.whole_range is None or tail is None or not tail.contiguous:
        return 0
    if tail.first_id is not None and StreamId.parse(tail.first_id) <= StreamId.parse(piece.after):
        return 0
    start_added, end_added, _ = piece.whole_range
    return max(0, min(tail.added - tail.length, end_added) - start_added)


def _span_weight(first: str, last: str) -> int:
    """A stand-in weight for a range of unknown count: its milliseconds, capped."""
    return min(1_000_000, max(1, StreamId.parse(last).ms - StreamId.parse(first).ms))


def pack_pieces(pieces: Sequence[Piece], num_partitions: int) -> list[tuple[Piece, ...]]:
    """Pieces into at most ``num_partitions`` tasks, balanced by weight (heaviest first into the
    lightest task, ties to the lowest); each task's pieces in stream and ID order.
    Deterministic: a replayed batch packs the same way."""
    n = max(1, num_partitions)
    bins: list[list[Piece]] = [[] for _ in range(n)]
    loads = [0] * n
    for p in sorted(pieces, key=lambda p: (-p.weight, p.stream, StreamId.parse(p.after))):
        i = min(range(n), key=lambda k: (loads[k], k))
        bins[i].append(p)
        loads[i] += p.weight
    return [tuple(sorted(b, key=lambda p: (p.stream, StreamId.parse(p.after)))) for b in bins
            if b]
