"""What the driver reports lost (``failOnDataLoss``: raised, else counted and logged once):

* entries trimmed or deleted before the group read them, found by a claim
  (:meth:`LossReports.claim_loss`);
* pending entries deleted before they were processed, found by a reclaim
  (:meth:`LossReports.deleted_while_pending`);
* the unread entries of streams deleted while subscribed (``streamPattern``,
  :meth:`LossReports.deleted`), from what the planning probes saw of each stream and what this
  query claimed since (:meth:`LossReports.observed`, :meth:`LossReports.took`,
  :meth:`LossReports.shipped`).

Driver side; the planning thread and the pre-claim thread take turns, never at once."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.ids import StreamId
from ..core.offsets import StreamBatch
from ..errors import DataLossError
from ..options.reader import ReaderOptions
from ..redisio import ClaimResult, Probe

log = logging.getLogger("spark_eventbus")


@dataclass
class SourceMetrics:
    """What the progress report counts (``reportLatestOffset``)."""

    lost_ranges: int = 0
    lost_entries: int = 0
    dead_lettered: int = 0
    reported_losses: set[tuple[str, str]] = field(default_factory=set)
    # the batch planned last, per stream: (claimed new entries, reclaimed idle ones)
    planned: dict[str, tuple[int, int]] = field(default_factory=dict)


class LossReports:
    def __init__(self, options: ReaderOptions, metrics: SourceMetrics) -> None:
        self.options = options
        self.metrics = metrics
        # What a stream deleted while subscribed (streamPattern) takes with it unread, per
        # stream: its group's lag at the last planning probe (None: unknown), its last
        # generated ID then, and whether the group has other consumers; what this process
        # claimed since (and the last ID claimed), and what it claimed or reclaimed into
        # batches not returned to Spark yet
        self.seen: dict[str, tuple[int | None, str | None, bool]] = {}
        self.claimed_since: dict[str, int] = {}
        self.claimed_to: dict[str, str] = {}
        self.unshipped: dict[str, int] = {}

    def observed(self, name: str, p: Probe) -> None:
        """A planning probe of stream ``name`` (a progress probe may run while the pre-claim
        claims, so it does not count)."""
        self.seen[name] = (p.stats().lag if p.has_new else 0, p.last_generated,
                           (p.consumers or 0) > 1)
        self.claimed_since.pop(name, None)
        self.claimed_to.pop(name, None)

    def took(self, name: str, claimed: int, reclaimed: int, last: str | None = None) -> None:
        """This query claimed or reclaimed entries of ``name`` (``last``: the last ID)."""
        if claimed:
            self.claimed_since[name] = self.claimed_since.get(name, 0) + claimed
        if last is not None:
            self.claimed_to[name] = last
        if claimed or reclaimed:
            self.unshipped[name] = self.unshipped.get(name, 0) + claimed + reclaimed

    def shipped(self, batches: Mapping[str, StreamBatch]) -> None:
        """``latestOffset`` returned these: their entries are the replay's to account for."""
        for name, b in batches.items():
            if name in self.unshipped:
                self.unshipped[name] = max(0, self.unshipped[name] - b.count)

    def deleted(self, names: Sequence[str]) -> None:
        """Streams deleted while subscribed (``streamPattern``): the entries their groups had
        not read when last looked at are lost, and follow ``failOnDataLoss`` (entries claimed
        but not yet read back are the replay's to report, as for any deleted entry). A group
        with other consumers may have read some of them elsewhere: then the count is a bound
        and not added to ``lostEntries``."""
        lost: dict[str, tuple[int | None, bool]] = {}
        for n in names:
            lag, generated, shared = self.seen.pop(n, (0, None, False))
            since, unshipped = self.claimed_since.pop(n, 0), self.unshipped.pop(n, 0)
            to = self.claimed_to.pop(n, None)
            if lag is None and generated is not None and to is not None \
                    and StreamId.parse(to) >= StreamId.parse(generated):
                lag, since = 0, 0  # unknown lag, but this query claimed up to the last entry
            k = None if lag is None else max(0, lag - since) + unshipped
            if k != 0:
                lost[n] = (k, shared)
        if not lost:
            return
        def count(k: int | None, shared: bool) -> str:
            return "an unknown number of" if k is None else f"{'up to ' if shared else ''}{k}"
        shown = ", ".join(f"{n!r} ({count(k, shared)} entries)"
                          for n, (k, shared) in list(lost.items())[:10])
        more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
        text = (f"stream(s) {shown}{more} matching option 'streamPattern' were deleted while "
                f"consumer group {self.options.group!r} had not read them (as last seen by "
                "this query; entries added after that are not counted)")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{text}. Restart the query to go on without them (a deleted stream is not "
                "subscribed again), or set option 'failOnDataLoss' to 'false' to skip such "
                "entries with a warning.")
        self.metrics.lost_ranges += len(lost)
        self.metrics.lost_entries += sum(k for k, shared in lost.values()
                                         if k is not None and not shared)
        log.warning("spark-eventbus: %s; skipping them (failOnDataLoss=false)", text)

    def claim_loss(self, name: str, res: ClaimResult) -> None:
        """A claim found entries of ``name`` gone before the group read them."""
        m = self.metrics
        what = f"{res.lost_count} entries" if res.lost_count >= 0 else "entries"
        where = f"with IDs after {res.lost_after}"
        if res.lost_before.startswith("("):
            where += f" up to {res.lost_before[1:]}"
        elif res.lost_before:
            where += f" and before {res.lost_before}"
        text = (f"{what} of stream {name!r} {where} were deleted or trimmed before consumer "
                f"group {self.options.group!r} read them")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{text}. Keep the stream longer (MAXLEN/MINID) than the query's lag, or set "
                "option 'failOnDataLoss' to 'false' to skip them with a warning.")
        key = (name, res.lost_after)
        # reported: not counted again if the stream is deleted before the next probe
        self.claimed_since[name] = self.claimed_since.get(name, 0) + max(0, res.lost_count)
        if key not in m.reported_losses:
            m.reported_losses.add(key)
            m.lost_ranges += 1
            m.lost_entries += max(0, res.lost_count)
            log.warning("spark-eventbus: %s; skipping them (failOnDataLoss=false)", text)

    def deleted_while_pending(self, name: str, ids: Sequence[str]) -> None:
        """A reclaim found pending entries of ``name`` deleted before they were processed."""
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{len(ids)} pending entries of stream {name!r} were deleted before they were "
                f"processed: {shown}. Redis has removed them from group "
                f"{self.options.group!r}'s pending list. Set option 'failOnDataLoss' to "
                "'false' to skip such entries with a warning.")
        self.metrics.lost_ranges += 1
        self.metrics.lost_entries += len(ids)
        log.warning("spark-eventbus: %d pending entries of stream %r were deleted before they "
                    "were processed (failOnDataLoss=false): %s", len(ids), name, shown)
