"""Entries a replayed batch no longer finds: how many, where, why, and the way past. Pure (no
Redis, no Spark): unit-tested alone (``tests/unit/test_losses.py``).

A batch's offset says exactly what it holds: per claimed range ``(first, last, count)`` and
per reclaimed ID. When an executor replays it, ``XRANGE first last`` returning fewer than
``count`` entries means ``count - returned`` of them are gone; a reclaimed ID whose
``XRANGE id id`` is empty is one entry gone. Counting this way is exact whoever holds the
entries in a pending list (this consumer, another one, or — on a replica promoted before the
claim reached it — nobody).

What is found is kept in Redis per (stream, group, consumer) under the batch's number, as a
:class:`LossRecord` (``lua/loss_record.lua``, README key layout), so that ``eventbus status``
can show a query stopped on it, ``eventbus group accept-loss`` can let the next replay of that
one batch move past it, and the driver can count what was moved past in ``lostEntries`` when
the batch commits (``lua/loss_settle.lua``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .ids import StreamId
from .offsets import ClaimedRange

# Ranges (or reclaimed IDs) a message lists before "and N more".
SHOWN = 10

CAUSES = ("a failover to a replica that had not received them (the old primary's last writes "
          "were never replicated), XDEL, or trimming by MAXLEN/MINID")
MOVING_PAST = ("they are counted in lostEntries (the query's progress), acked, and never "
               "delivered")


@dataclass(frozen=True)
class RangeLoss:
    """Entries of one claimed range, or one reclaimed ID, that a replay did not find."""

    first: str
    last: str  # == first for a reclaimed ID
    count: int  # entries the batch holds in [first, last] (1 for a reclaimed ID)
    missing: int  # of them, how many XRANGE no longer returned
    reclaimed: bool = False
    accepted: int = 0  # how many an operator accepted to lose (eventbus group accept-loss)
    skipped: int = 0  # how many a replay moved past: counted, acked, never delivered

    @property
    def name(self) -> str:
        """Its field in a :class:`LossRecord`: ``<first>..<last>``, or the reclaimed ID."""
        return self.first if self.reclaimed else f"{self.first}..{self.last}"

    @classmethod
    def of_name(cls, name: str, values: Sequence[int]) -> RangeLoss:
        """From a record's field and its ``[count, missing, accepted, skipped]``."""
        count, missing, accepted, skipped = (int(v) for v in values)
        first, sep, last = name.partition("..")
        return cls(first, last if sep else first, count, missing, not sep, accepted, skipped)

    def describe(self) -> str:
        if self.reclaimed:
            return f"reclaimed ID {self.first}"
        return f"[{self.first}, {self.last}]: {self.missing} of {self.count}"

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "count": self.count,
                "missing": self.missing, "reclaimed": self.reclaimed,
                "accepted": self.accepted, "skipped": self.skipped}


def range_loss(chunk: ClaimedRange, returned: int) -> RangeLoss | None:
    """What a claimed range lost, when its replay returned ``returned`` entries (None: none).

    Nothing can be added inside a claimed range afterwards (``XADD`` IDs only grow), so every
    entry short of ``count`` is one the batch claimed and the stream no longer holds."""
    if returned >= chunk.count:
        return None
    return RangeLoss(chunk.first, chunk.last, chunk.count, chunk.count - returned)


def total_missing(lost: Sequence[RangeLoss]) -> int:
    return sum(r.missing for r in lost)


def listing(lost: Sequence[RangeLoss], limit: int = SHOWN) -> str:
    """The ranges, ``[first, last]: missing of count``, at most ``limit`` of them."""
    shown = "; ".join(r.describe() for r in lost[:limit])
    more = len(lost) - limit
    return shown + (f"; and {more} more" if more > 0 else "")


def accept_command(stream: str, group: str, consumer: str, flags: Sequence[str] = ()) -> str:
    """The ``eventbus`` command that lets the next replay of the recorded batch move past it
    (``flags``: the connection's, :func:`.connection.cli_connection`). ``--consumer`` only
    when it is not the default ``spark-<group>``."""
    words = ["eventbus", *flags, "group", "accept-loss", "--stream", stream, "--group", group]
    if consumer != f"spark-{group}":
        words += ["--consumer", consumer]
    return " ".join(shlex.quote(w) for w in words)


def loss_message(stream: str, group: str, consumer: str, seq: int,
                 lost: Sequence[RangeLoss], flags: Sequence[str] = (),
                 env: Sequence[str] = ()) -> str:
    """The ``DataLossError`` of a replay that found ``lost`` (``failOnDataLoss=true``); the
    command in it can be pasted as it stands (``flags``, ``env``:
    :func:`.connection.cli_connection`)."""
    n = total_missing(lost)
    ranges = len(lost)
    command = accept_command(stream, group, consumer, flags)
    note = (f" (with the password{'s' if len(env) > 1 else ''} in {' and '.join(env)}, "
            "which it reads when --password is not given)") if env else ""
    return (
        f"{n} {_entries(n)} of stream {stream!r} that batch {seq} of this query claimed "
        f"(group {group!r}, consumer {consumer!r}) {'is' if n == 1 else 'are'} no longer in "
        f"the stream, in {ranges} {'range' if ranges == 1 else 'ranges'}: {listing(lost)}. "
        f"Likely causes, most likely first: {CAUSES}. "
        f"To move past them in this batch only, run `{command}`{note} "
        "and restart the query; or set option 'failOnDataLoss' to 'false' to move past every "
        f"such loss from then on. Moving past them means {MOVING_PAST}. The query stops here "
        "on every restart until one of the two is done; `eventbus status` shows this loss "
        "(docs/data-loss.md).")


def skip_message(stream: str, seq: int, lost: Sequence[RangeLoss], why: str) -> str:
    """The warning of a replay that moves past ``lost`` (``why``: the option or acceptance)."""
    n = total_missing(lost)
    return (f"spark-eventbus: moving past {n} {_entries(n)} of stream {stream!r} in batch {seq} "
            f"no longer in the stream ({why}): {listing(lost)}; {MOVING_PAST}")


def _entries(n: int) -> str:
    return "entry" if n == 1 else "entries"


@dataclass(frozen=True)
class LossRecord:
    """What the replays of one batch found missing in one stream, for one consumer."""

    consumer: str
    run: str  # the checkpoint run of the query (its offsets' "run")
    seq: int  # the batch
    failed_at_ms: int | None  # the last replay that stopped the query on it (None: never)
    ranges: tuple[RangeLoss, ...] = field(default=())

    @classmethod
    def from_json(cls, consumer: str, data: Mapping[str, Any]) -> LossRecord:
        # Lua's cjson encodes an empty object as {} and an absent field as nothing.
        raw = data.get("ranges") or {}
        ranges = sorted((RangeLoss.of_name(k, v) for k, v in raw.items()),
                        key=lambda r: StreamId.parse(r.first))
        failed = data.get("failed_at")
        return cls(consumer, str(data.get("run", "")), int(data.get("seq", -1)),
                   None if failed is None else int(failed), tuple(ranges))

    @property
    def missing(self) -> int:
        return total_missing(self.ranges)

    @property
    def stopped(self) -> bool:
        """The query stopped on it and has not moved past all of it yet."""
        return self.failed_at_ms is not None and any(r.skipped < r.missing for r in self.ranges)

    @property
    def accepted(self) -> bool:
        """An operator accepted every entry recorded missing: the next replay moves past."""
        return all(r.accepted >= r.missing for r in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "run": self.run, "batch": self.seq,
                "failed_at_ms": self.failed_at_ms, "missing": self.missing,
                "accepted": self.accepted, "ranges": [r.to_json() for r in self.ranges]}
