"""The packed form of a read without a group's offset (:class:`.positions.PositionOffset`), for
queries over many streams: written out, each position costs ~40 bytes of JSON, and Spark keeps
every batch's offset in its checkpoint's offset log and in each progress event. Pure (no Redis,
no Spark); round trips are property-tested (``tests/unit/test_positions.py``).

The body holds each section (the streams' positions, the streams that joined and where they
started, the streams read whole) sorted by name, as columns: the names joined by NUL, then the
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

# The body's own version (the offset's "v" says which form the offset is in).
_BODY = 1
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


def _section(section: Mapping[str, Positioned]) -> bytes:
    names = sorted(section)
    if any("\0" in name for name in names):
        raise _Unpackable("a name holds a NUL")
    raw = "\0".join(names).encode("utf-8", "surrogatepass")  # any str, as JSON carries it
    positions = [section[name] for name in names]
    ids = [p.id for p in positions]
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
    base = min(ms, default=0)
    added = [0 if p.added is None else p.added + 1 for p in positions]
    try:
        return b"".join([_numbers([len(names), len(raw), base]), raw,
                         _numbers([m - base for m in ms]), _numbers(seq), _numbers(added)])
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
        parts = [_section(s) for s in sections]
        parts.append(_section(dict.fromkeys(whole, _Name())))
    except _Unpackable:
        return None
    body = bytes([_BODY]) + b"".join(parts)
    return base64.b64encode(zlib.compress(body, _LEVEL)).decode("ascii")


def unpack(text: str, sections: int, make: Callable[[str, int | None], T]
           ) -> tuple[list[dict[str, T]], list[str]]:
    """The inverse of :func:`pack` (``sections``: how many were packed, ``whole`` aside), each
    position made by ``make(id, added)``."""
    try:
        body = memoryview(zlib.decompress(base64.b64decode(text, validate=True)))
        if body[0] != _BODY:
            raise ValueError(f"packed body version {body[0]}")
        at = 1
        out: list[dict[str, T]] = []
        whole: list[str] = []
        for index in range(sections + 1):
            (count, size, base), at = _column(body, at, 3)
            names = bytes(body[at:at + size]).decode("utf-8", "surrogatepass").split("\0") \
                if count else []
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
