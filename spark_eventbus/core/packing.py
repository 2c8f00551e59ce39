"""The packed form of a read without a group's offset (:class:`.positions.PositionOffset`) and
of a group read's batch (:func:`pack_batch`, :class:`.offsets.BatchOffset`), for queries over
many streams: written out, each position costs ~40 bytes of JSON, and Spark keeps
every batch's offset in its checkpoint's offset log and in each progress event. Pure (no Redis,
no Spark); round trips are property-tested (``tests/unit/test_positions.py``).

The body holds each section (the streams' positions, the streams that joined and where they
started, the streams read whole) sorted by name, as columns: the names joined by NUL (a later
section that names only streams of the first: a bitmap over the first's names), then the
positions' milliseconds (less the section's smallest), sequence numbers and entries-added
counts (+1; 0: not known) as little-endian unsigned 64-bit integers. Deflated (zlib, its
fastest level: names that share prefixes and numbers of similar size shrink most) and written
in base64, it costs ~12 bytes per position for 100,000 streams whose positions spread over an
hour, written or read in a few tenths of a second. A section whose names hold a NUL, or an ID
not of the form ``<ms>-<seq>`` Redis writes, cannot be packed (:func:`pack` returns None: the
offset is written out)."""

from __future__ import annotations

import base64
import sys
import zlib
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..errors import EventBusError

T = TypeVar("T")

# Offsets of this many streams and more are packed, with or without a group (fewer are
# written out, readable).
PACK_FROM = 1_000
# The body's own version (the offset's "v" says which form the offset is in): 1, or 2 where a
# later section names only streams of the first (written as a bitmap over the first's names;
# the batch in which streams join lists each of them twice). A body without such a section is
# still written as 1, which every version reads.
_BODY = 1
_BODY_SUBSETS = 2
_SUBSET = 2**64 - 1  # a section's "size of its names" when they are a bitmap over the first's
_LEVEL = 1  # zlib's fastest: at 100,000 streams, ~5x faster than its default for ~8 % more


class _Unpackable(Exception):
    """A name holding a NUL, or an ID not of the form ``<ms>-<seq>`` without leading zeros."""


def _numbers(values: Sequence[int]) -> bytes:
    column = array("Q", values)  # Redis's IDs are two unsigned 64-bit numbers
    if sys.byteorder != "little":
        column.byteswap()
    return column.tobytes()


def _column(body: memoryview, at: int, count: int) -> tuple[list[int], int]:
    column = array("Q")
    end = at + 8 * count
    column.frombytes(body[at:end])
    if sys.byteorder != "little":
        column.byteswap()
    return column.tolist(), end


class Positioned(Protocol):
    """A position: an ID and the entries-added count there (None: not known)."""

    @property
    def id(self) -> str: ...

    @property
    def added(self) -> int | None: ...


def _names(names: Sequence[str]) -> bytes:
    if any("\0" in name for name in names):
        raise _Unpackable("a name holds a NUL")
    return "\0".join(names).encode("utf-8", "surrogatepass")  # any str, as JSON carries it


def _ids(ids: Sequence[str]) -> tuple[list[int], list[int]]:
    """Each ID's milliseconds and sequence number."""
    parts = "-".join(ids).split("-") if ids else []
    if len(parts) != 2 * len(ids):
        raise _Unpackable("an ID without its one '-'")
    try:
        ms, seq = list(map(int, parts[0::2])), list(map(int, parts[1::2]))
    except ValueError as exc:
        raise _Unpackable(str(exc)) from exc
    # Each ID written again from its numbers must be itself: "5" beside "1-2-3" splits into
    # pairs too, and int() takes "+1", " 1", "1_0" and "01"
    if "\0".join(map("{}-{}".format, ms, seq)) != "\0".join(ids):
        raise _Unpackable("an ID not as Redis writes it")
    return ms, seq


def _bitmap(names: Sequence[str], within: Mapping[str, int], total: int) -> bytes:
    """``names`` (each a key of ``within``: its index) as a bitmap of ``total`` bits."""
    bits = bytearray((total + 7) // 8)
    for name in names:
        i = within[name]
        bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)


def _from_bitmap(bits: memoryview, names: Sequence[str]) -> list[str]:
    """The names of ``names`` whose bit is set, in their order."""
    return [name for i, name in enumerate(names) if bits[i >> 3] >> (i & 7) & 1]


def _section(section: Mapping[str, Positioned],
             first: Mapping[str, int] | None = None) -> tuple[bytes, bool]:
    """A section: its names (or, when ``first`` — the first section's names and their index —
    holds them all, a bitmap over those: then True), then its positions' columns."""
    names = sorted(section)
    subset = False
    if first is not None and names and all(n in first for n in names):
        subset, size, raw = True, _SUBSET, _bitmap(names, first, len(first))
    else:
        raw = _names(names)
        size = len(raw)
    positions = [section[name] for name in names]
    ms, seq = _ids([p.id for p in positions])
    base = min(ms, default=0)
    added = [0 if p.added is None else p.added + 1 for p in positions]
    try:
        return b"".join([_numbers([len(names), size, base]), raw,
                         _numbers([m - base for m in ms]), _numbers(seq),
                         _numbers(added)]), subset
    except OverflowError as exc:  # a count of 2**64 - 1
        raise _Unpackable(str(exc)) from exc


@dataclass(frozen=True)
class _Name:
    """A name of ``whole``, packed as a section (its position unused)."""

    id: str = "0-0"
    added: int | None = None


def pack(sections: Sequence[Mapping[str, Positioned]], whole: Sequence[str]) -> str | None:
    """``sections``: per section, name → position; ``whole``: names. The packed text, or None
    when a section cannot be packed."""
    try:
        first = {name: i for i, name in enumerate(sorted(sections[0]))} if sections else {}
        parts = [_section(s, first if i else None) for i, s in enumerate(sections)]
        parts.append(_section(dict.fromkeys(whole, _Name()), first if sections else None))
    except _Unpackable:
        return None
    subsets = any(subset for _, subset in parts)  # none: the same body as version 1's
    body = bytes([_BODY_SUBSETS if subsets else _BODY]) + b"".join(p for p, _ in parts)
    return base64.b64encode(zlib.compress(body, _LEVEL)).decode("ascii")


def unpack(text: str, sections: int, make: Callable[[str, int | None], T]
           ) -> tuple[list[dict[str, T]], list[str]]:
    """The inverse of :func:`pack` (``sections``: how many were packed, ``whole`` aside), each
    position made by ``make(id, added)``."""
    try:
        body = memoryview(zlib.decompress(base64.b64decode(text, validate=True)))
        if body[0] not in (_BODY, _BODY_SUBSETS):
            raise ValueError(f"packed body version {body[0]}")
        at = 1
        out: list[dict[str, T]] = []
        whole: list[str] = []
        first: list[str] = []
        for index in range(sections + 1):
            (count, size, base), at = _column(body, at, 3)
            if size == _SUBSET and body[0] == _BODY_SUBSETS and index:
                size = (len(first) + 7) // 8
                if len(body[at:at + size]) != size:
                    raise ValueError("a bitmap cut short")
                names = _from_bitmap(body[at:at + size], first)
            else:
                names = bytes(body[at:at + size]).decode("utf-8", "surrogatepass").split(
                    "\0") if count else []
            if index == 0:
                first = names
            at += size
            ms, at = _column(body, at, count)
            seq, at = _column(body, at, count)
            added, at = _column(body, at, count)
            if len(names) != count:
                raise ValueError(f"{len(names)} names for {count} positions")
            if index == sections:
                whole = names
                break
            out.append({n: make(f"{m + base}-{s}", None if a == 0 else a - 1)
                        for n, m, s, a in zip(names, ms, seq, added, strict=True)})
        if at != len(body):
            raise ValueError(f"{len(body) - at} bytes left over")
    except (ValueError, IndexError, zlib.error) as exc:
        raise EventBusError(
            f"a packed offset of a read without a consumer group could not be read ({exc}): "
            "the checkpoint is damaged, or was written by a newer spark-eventbus. Start the "
            "query with a new checkpointLocation, or run it with the version that wrote it."
            ) from exc
    return out, whole


# -- a group read's batch (core.offsets.BatchOffset) ----------------------------------------------

# A stream's part of a batch: its chunks (first ID, last ID, count) and reclaimed entries (ID,
# deliveries)
Chunks = Sequence[tuple[str, str, int]]
Reclaimed = Sequence[tuple[str, int]]
_BATCH_BODY = 1


def pack_batch(streams: Mapping[str, tuple[Chunks, Reclaimed]]) -> str | None:
    """A group read's batch, packed as columns like a position section: the names (sorted),
    then per stream its numbers of chunks and of reclaimed entries, per chunk its first ID's
    milliseconds (less the smallest of the batch) and sequence number, its last ID's
    milliseconds after the first's and sequence number, and its count, per reclaimed entry its
    ID and deliveries. None when it cannot be packed (a name holding a NUL, an ID not as Redis
    writes it, a chunk ending before it begins)."""
    names = sorted(streams)
    try:
        raw = _names(names)
        chunks = [c for n in names for c in streams[n][0]]
        taken = [e for n in names for e in streams[n][1]]
        first_ms, first_seq = _ids([c[0] for c in chunks])
        last_ms, last_seq = _ids([c[1] for c in chunks])
        ms, seq = _ids([e[0] for e in taken])
        base = min(first_ms + ms, default=0)
        spans = [b - a for a, b in zip(first_ms, last_ms, strict=True)]
        if any(x < 0 for x in spans):
            raise _Unpackable("a chunk that ends before it begins")
        body = b"".join([
            bytes([_BATCH_BODY]),
            _numbers([len(names), len(raw), base, len(chunks), len(taken)]), raw,
            _numbers([len(streams[n][0]) for n in names]),
            _numbers([len(streams[n][1]) for n in names]),
            _numbers([m - base for m in first_ms]), _numbers(first_seq), _numbers(spans),
            _numbers(last_seq), _numbers([c[2] for c in chunks]),
            _numbers([m - base for m in ms]), _numbers(seq), _numbers([e[1] for e in taken])])
    except (_Unpackable, OverflowError):  # OverflowError: a negative count, or one >= 2**64
        return None
    return base64.b64encode(zlib.compress(body, _LEVEL)).decode("ascii")


def unpack_batch(text: str) -> dict[str, tuple[list[tuple[str, str, int]], list[tuple[str, int]]]]:
    """The inverse of :func:`pack_batch`."""
    try:
        body = memoryview(zlib.decompress(base64.b64decode(text, validate=True)))
        if body[0] != _BATCH_BODY:
            raise ValueError(f"packed body version {body[0]}")
        (count, size, base, n_chunks, n_taken), at = _column(body, 1, 5)
        names = bytes(body[at:at + size]).decode("utf-8", "surrogatepass").split("\0") \
            if count else []
        at += size
        if len(names) != count:
            raise ValueError(f"{len(names)} names for {count} streams")
        per_chunks, at = _column(body, at, count)
        per_taken, at = _column(body, at, count)
        first_ms, at = _column(body, at, n_chunks)
        first_seq, at = _column(body, at, n_chunks)
        spans, at = _column(body, at, n_chunks)
        last_seq, at = _column(body, at, n_chunks)
        counts, at = _column(body, at, n_chunks)
        ms, at = _column(body, at, n_taken)
        seq, at = _column(body, at, n_taken)
        deliveries, at = _column(body, at, n_taken)
        if at != len(body) or sum(per_chunks) != n_chunks or sum(per_taken) != n_taken:
            raise ValueError("its columns do not add up")
        out = {}
        c = t = 0
        for name, k, r in zip(names, per_chunks, per_taken, strict=True):
            out[name] = (
                [(f"{first_ms[i] + base}-{first_seq[i]}",
                  f"{first_ms[i] + base + spans[i]}-{last_seq[i]}", counts[i])
                 for i in range(c, c + k)],
                [(f"{ms[i] + base}-{seq[i]}", deliveries[i]) for i in range(t, t + r)])
            c, t = c + k, t + r
    except (ValueError, IndexError, zlib.error) as exc:
        raise EventBusError(
            f"a packed offset of a read through a consumer group could not be read ({exc}): "
            "the checkpoint is damaged, or was written by a newer spark-eventbus. Start the "
            "query with a new checkpointLocation, or run it with the version that wrote it."
            ) from exc
    return out
