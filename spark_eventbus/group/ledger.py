"""The reader's bookkeeping on the driver (never pickled; the planning thread and the
pre-claim thread take turns, never at once): :class:`ClaimState`, where claiming and acking
stand, and :class:`BatchLedger`, what this process wrote into the plans of the batches it
builds:

* the entries and bytes it claimed and reclaimed into each batch, so that
  ``maxBytesPerTrigger`` knows what is left (a plan left by another driver: unknown);
* the streams whose plan of each batch it may have written: where the reader looks for plans
  once no driver before this one can have left any (:mod:`.closing`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

# Batches older than the one planned minus this are no longer sized (only the batch planned,
# the one pre-claimed and the one in flight are).
_SIZED_BATCHES = 2


@dataclass
class ClaimState:
    """Where claiming and acking stand."""

    initial_run: str | None = None  # initialOffset's run: Spark may ask more than once
    acked_seq: int = -1  # batches up to this one are acked
    ack_scheduled_seq: int = -1  # ... or being acked by the prefetcher
    preclaimed_seq: int = -1  # the batch the prefetcher claims for
    planned_once: bool = False  # latestOffset has run in this driver
    closed: tuple[str, int] | None = None  # the committed batch Closer.close_committed closed
    idle: tuple[str, int] | None = None  # latestOffset found nothing for this batch number
    # when latestOffset last returned a new batch (or the driver started): maxTriggerDelay
    last_batch_at: float = field(default_factory=time.monotonic)
    last_trim_at: float = 0.0  # trimAcked: when the streams were last trimmed
    trims: int = 0  # ... how many times
    acked_since_trim: set[str] = field(default_factory=set)  # ... streams acked since
    # The last batch whose plans a driver before this one can have written: its first batch
    # and the pre-claim of the next (one live driver per consumer: the lease). Plans of later
    # batches are only where this process's claims wrote (BatchLedger.written), so a quiet
    # stream costs no plan reads, closes or loss checks per batch.
    full_until: int | None = None
    # ... and the streams where it can have written them: those with a plan key or a loss
    # record when this driver first planned (redisio.plans.left_behind), and streams that
    # joined later with either. None: not looked yet (every stream counts).
    earlier: set[str] | None = None
    # batch seq -> the key of its contents in Redis (a large batch: its offset names them),
    # for the batches this driver returned or read; dropped when the batch after closes
    contents: dict[int, str] = field(default_factory=dict)


class BatchLedger:
    def __init__(self, max_bytes_per_trigger: int | None) -> None:
        self.max_bytes = max_bytes_per_trigger
        # (run, seq) -> [entries, bytes] this process claimed and reclaimed into that plan
        self.sizes: dict[tuple[str, int], list[int]] = {}
        # (run, seq) -> the streams whose plan of that batch this process may have written
        self.wrote: dict[tuple[str, int], set[str]] = {}

    def writes(self, run: str, seq: int, names: Iterable[str]) -> None:
        """A claim or reclaim script is about to run on these streams for batch ``seq``."""
        self.wrote.setdefault((run, seq), set()).update(names)

    def written(self, run: str, seq: int) -> set[str]:
        """The streams whose plan of batch ``seq`` this process may have written."""
        return set(self.wrote.get((run, seq), ()))

    def written_up_to(self, run: str, up_to: int) -> set[str]:
        """The streams whose plans of batches up to ``up_to`` this process may have written."""
        out: set[str] = set()
        for (r, seq), names in self.wrote.items():
            if r == run and seq <= up_to:
                out |= names
        return out

    def forget_written(self, run: str, up_to: int) -> None:
        """Batches up to ``up_to`` are committed and closed: their plans are gone."""
        for key in [k for k in self.wrote if k[0] != run or k[1] <= up_to]:
            del self.wrote[key]

    def knows_size(self, run: str, seq: int) -> bool:
        """Whether this process claimed everything in the plan of batch ``seq``, so that
        maxBytesPerTrigger can top it up; a plan of a driver that died is shipped as it is."""
        return (run, seq) in self.sizes

    def bytes_left(self, run: str, seq: int) -> tuple[int | None, bool]:
        """maxBytesPerTrigger's room left in batch ``seq`` (None: no bound), and whether the
        batch is still empty."""
        entries, size = self._sized(run, seq)
        return (None if self.max_bytes is None else self.max_bytes - size), entries == 0

    def count(self, run: str, seq: int, entries: int, size: int) -> None:
        got = self._sized(run, seq)
        got[0] += entries
        got[1] += size

    def _sized(self, run: str, seq: int) -> list[int]:
        got = self.sizes.get((run, seq))
        if got is None:
            got = self.sizes[(run, seq)] = [0, 0]
            for key in [k for k in self.sizes if k[1] < seq - _SIZED_BATCHES]:
                del self.sizes[key]
        return got
