"""Retention of acked entries, pure part: how far a stream may be trimmed without taking an entry
any consumer group still needs (``eventbus stream trim``, reader option ``trimAcked``). No
Redis; the trim itself is :mod:`.redisio.retention` (``lua/trim.lua``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .ids import StreamId


@dataclass(frozen=True)
class GroupPosition:
    """Where one group stands: its ``last-delivered-id`` and its oldest pending entry."""

    name: str
    last_delivered: StreamId
    oldest_pending: StreamId | None  # None: nothing pending

    @property
    def needs_from(self) -> StreamId:
        """The oldest entry the group may still read or re-read: the older of its oldest
        pending entry and the entry after its last-delivered-id."""
        after = self.last_delivered.next()
        if self.oldest_pending is not None and self.oldest_pending < after:
            return self.oldest_pending
        return after


@dataclass(frozen=True)
class TrimBound:
    """Entries with IDs before ``keep_from`` are acked by every group (``XTRIM MINID``);
    ``held_by`` is the group that needs the oldest entry (it holds the rest back)."""

    keep_from: StreamId | None  # None: trim nothing (no group reads the stream)
    held_by: str | None


def trim_bound(groups: Sequence[GroupPosition]) -> TrimBound:
    """The trim bound of a stream read by ``groups``. A stream without groups is never trimmed:
    nothing says its entries were consumed (a group created later at ``earliest`` would find
    them gone)."""
    if not groups:
        return TrimBound(None, None)
    holder = min(groups, key=lambda g: (g.needs_from, g.name))
    return TrimBound(holder.needs_from, holder.name)
