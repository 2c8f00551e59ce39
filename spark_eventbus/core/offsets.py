"""The offset model: an offset *describes one micro-batch*.

Spark's checkpoint is the authority for what a batch contains, so the offset lists it exactly,
compactly (Spark writes it to its offset log every batch; only the streams with entries in the
batch are listed)::

    {"v": 2, "run": "<uuid>", "seq": 7,
     "streams": {"orders": ["1700-0 12-3 5000", ..., "r 1650-0 2", ...]}}

each chunk as ``"<first> <last ms - first ms>-<last seq> <count>"``, each reclaimed entry as
``"r <id> <deliveries>"`` (claim plans in Redis keep the JSON form,
:meth:`StreamBatch.from_json`). From :data:`PACK_FROM` streams in a batch on, the streams are
packed instead (``"v": 3``, ``"count"``: how many, ``"packed"``: :func:`.packing.pack_batch`).

* a **chunk** is what one ``XREADGROUP ... >`` call claimed: a contiguous slice of the stream,
  fully described by ``(first_id, last_id, count)``;
* **reclaimed** entries (taken over from idle consumers) are scattered, so they are listed with
  the delivery count they had when claimed;
* ``seq`` grows by one per batch; ``run`` identifies the checkpoint (set once by
  ``initialOffset``) so a claim plan left in Redis by a crashed driver is matched to its query.

JSON of primitives with a fixed key order: Spark compares offsets as JSON text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventBusError
from .packing import PACK_FROM, pack_batch, unpack_batch

VERSION = 2
PACKED = 3  # the packed form (.packing.pack_batch), from PACK_FROM streams in a batch on


@dataclass(frozen=True)
class ClaimedRange:
    """A contiguous slice claimed by one XREADGROUP: every stream entry in [first, last]."""

    first: str
    last: str
    count: int

    def to_json(self) -> list[Any]:
        return [self.first, self.last, self.count]


@dataclass(frozen=True)
class StreamBatch:
    """What one batch holds of one stream."""

    chunks: tuple[ClaimedRange, ...] = ()
    reclaimed: tuple[tuple[str, int], ...] = ()

    @property
    def count(self) -> int:
        return sum(c.count for c in self.chunks) + len(self.reclaimed)

    def __bool__(self) -> bool:
        return bool(self.chunks or self.reclaimed)

    def __add__(self, other: StreamBatch) -> StreamBatch:
        return StreamBatch(self.chunks + other.chunks, self.reclaimed + other.reclaimed)

    def to_json(self) -> dict[str, Any]:
        return {"chunks": [c.to_json() for c in self.chunks],
                "reclaimed": [[i, d] for i, d in self.reclaimed]}

    def to_compact(self) -> list[str]:
        """The v2 offset form (see the module's docstring)."""
        out = []
        for c in self.chunks:
            first_ms, _, _ = c.first.partition("-")
            last_ms, _, last_seq = c.last.partition("-")
            out.append(f"{c.first} {int(last_ms) - int(first_ms)}-{last_seq} {c.count}")
        out += [f"r {i} {d}" for i, d in self.reclaimed]
        return out

    @classmethod
    def from_compact(cls, items: list[str]) -> StreamBatch:
        chunks, reclaimed = [], []
        for item in items:
            parts = item.split(" ")
            if parts[0] == "r":
                reclaimed.append((parts[1], int(parts[2])))
                continue
            first, delta, count = parts
            first_ms = int(first.partition("-")[0])
            delta_ms, _, last_seq = delta.rpartition("-")
            chunks.append(ClaimedRange(first, f"{first_ms + int(delta_ms)}-{last_seq}",
                                       int(count)))
        return cls(tuple(chunks), tuple(reclaimed))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamBatch:
        # Lua's cjson encodes an empty array as {}: accept both.
        chunks = data.get("chunks") or []
        reclaimed = data.get("reclaimed") or []
        return cls(
            tuple(ClaimedRange(str(f), str(l_), int(n)) for f, l_, n in chunks),
            tuple((str(i), int(d)) for i, d in reclaimed),
        )


@dataclass(frozen=True)
class BatchOffset:
    """The end offset of a micro-batch (and, for the next batch, its start)."""

    run: str
    seq: int
    streams: Mapping[str, StreamBatch] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Written out (``v`` 2) up to :data:`PACK_FROM` streams, packed above (``v`` 3,
        :func:`.packing.pack_batch`: ~10 bytes per stream of one chunk instead of ~50) unless
        a name or an ID cannot be."""
        if len(self.streams) >= PACK_FROM:
            packed = pack_batch({name: ([(c.first, c.last, c.count) for c in b.chunks],
                                        b.reclaimed) for name, b in self.streams.items()})
            if packed is not None:
                return {"v": PACKED, "run": self.run, "seq": self.seq,
                        "count": len(self.streams), "packed": packed}
        return {
            "v": VERSION,
            "run": self.run,
            "seq": self.seq,
            "streams": {name: self.streams[name].to_compact() for name in sorted(self.streams)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchOffset:
        version = data.get("v")
        if data.get("kind") is not None:  # positions.PositionOffset's: a read without a group
            raise EventBusError(
                f"checkpoint offset {dict(data)!r} was written by a spark-eventbus read without "
                "a consumer group (option 'group' not given), and this query reads with one: a "
                "checkpoint belongs to one way of reading. Start the query with a new "
                "checkpointLocation, or give it the options it was started with.")
        if version == PACKED and isinstance(data.get("packed"), str):
            return cls(run=str(data["run"]), seq=int(data["seq"]), streams={
                name: StreamBatch(tuple(ClaimedRange(*c) for c in chunks), tuple(reclaimed))
                for name, (chunks, reclaimed) in unpack_batch(data["packed"]).items()})
        if version != VERSION:
            raise EventBusError(
                f"checkpoint offset {dict(data)!r} was written by another version of "
                f"spark-eventbus (offset format v{VERSION} or v{PACKED} expected); start the "
                "query with a new checkpointLocation."
            )
        return cls(
            run=str(data["run"]),
            seq=int(data["seq"]),
            streams={name: StreamBatch.from_compact(sb) for name, sb in data["streams"].items()},
        )

    @property
    def count(self) -> int:
        return sum(sb.count for sb in self.streams.values())
