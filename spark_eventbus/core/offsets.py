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

From :data:`NAME_FROM` bytes of packed contents on (some thousands of streams in a batch),
the offset names the batch instead (``"v": 4``): the packed contents are kept in Redis under
:func:`.keys.batch_key` (written before the offset is returned, on the replicas first with
``waitReplicas``), and the offset holds what checks them: ``"count"`` streams, ``"entries"``,
the ``"digest"`` of the contents and ``"at"``, the first stream (the key's slot). So Spark's
offset log and each progress event stay small whatever the number of streams. Reading it
needs Redis: :meth:`.group.driver.ReaderDriver.offset`.

JSON of primitives with a fixed key order: Spark compares offsets as JSON text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventBusError
from .packing import PACK_FROM, pack_batch, unpack_batch

VERSION = 2
PACKED = 3  # the packed form (.packing.pack_batch), from PACK_FROM streams in a batch on
NAMED = 4  # the batch named, its packed form kept in Redis (keys.batch_key)
# Packed contents of at least this many bytes are named rather than written into the offset:
# a progress event carries a batch's start and end offsets besides the source's report
# (progress.DETAIL_BYTES), and stays under 64 KB with both.
NAME_FROM = 16 * 1024


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

    def describe(self) -> tuple[dict[str, Any], str | None]:
        """The offset of this batch, and None; or from :data:`NAME_FROM` bytes of packed
        contents on, the offset that names it (``"v": 4``) and the packed contents to keep
        under :func:`.keys.batch_key` of its ``"at"`` stream before Spark gets the offset."""
        out = self.to_json()
        body = out.get("packed")
        if out["v"] != PACKED or not isinstance(body, str) or len(body) < NAME_FROM:
            return out, None
        return {"v": NAMED, "run": self.run, "seq": self.seq, "count": len(self.streams),
                "entries": self.count, "at": min(self.streams), "digest": digest(body)}, body

    @staticmethod
    def names_contents(data: Mapping[str, Any]) -> bool:
        """Whether ``data`` is an offset that names its batch (:meth:`describe`)."""
        return data.get("v") == NAMED and data.get("kind") is None

    @classmethod
    def from_named(cls, data: Mapping[str, Any], body: str) -> BatchOffset:
        """The batch of an offset that names it (:meth:`describe`), from the contents kept in
        Redis; refused unless they are the ones it names (digest, streams and entries)."""
        if digest(body) != data.get("digest"):
            raise EventBusError(
                f"batch {data.get('seq')} of checkpoint run {data.get('run')}: the contents "
                "kept in Redis for it are not the ones its offset names (digest differs); the "
                "key was overwritten. Start the query with a new checkpointLocation (its "
                "entries stay pending in the group and are reclaimed after claimMinIdleMs).")
        batch = cls.from_json({"v": PACKED, "run": data["run"], "seq": data["seq"],
                               "count": data["count"], "packed": body})
        if len(batch.streams) != data.get("count") or batch.count != data.get("entries"):
            raise EventBusError(
                f"batch {data.get('seq')} of checkpoint run {data.get('run')}: its contents "
                f"hold {len(batch.streams)} streams and {batch.count} entries, its offset says "
                f"{data.get('count')} and {data.get('entries')}.")
        return batch

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
        if version == NAMED:  # a programming error: such an offset is read through Redis
            raise EventBusError(
                f"batch {data.get('seq')} of checkpoint run {data.get('run')} names its "
                "contents in Redis; the query's driver reads them (ReaderDriver.offset).")
        if version != VERSION:
            raise EventBusError(
                f"checkpoint offset {dict(data)!r} was written by another version of "
                f"spark-eventbus (offset format v{VERSION}, v{PACKED} or v{NAMED} expected); "
                "start the "
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


def digest(body: str) -> str:
    """What an offset that names its batch checks the kept contents with."""
    return hashlib.sha256(body.encode()).hexdigest()[:32]
