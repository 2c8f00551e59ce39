"""Each stream's group as last probed, and which streams to probe again (driver).

A quiet stream costs no command of its own: an ``XREAD COUNT 1`` per 1,000 streams
(pipelined) names the streams with news, and only they (and the streams this query changed
since their last probe: claims, reclaims, trims) are probed; every stream is probed in full at
least every ``min(claimMinIdleMs, discoveryIntervalMs)``.

Two threads use it: the planning thread (``latestOffset``, its progress report) and the
pre-claim thread (:mod:`.prefetch`); a probe holds ``_probing``, and the marks of changed
streams ``_marks`` (acks mark them from either thread)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace

from ..errors import ConfigError, EventBusConnectionError, EventBusError
from ..options.reader import ReaderOptions
from ..redisio import ConsumerOps, GroupStats, Probe, probes
from .loss_reports import LossReports

log = logging.getLogger("spark_eventbus")


class ProbeCache:
    def __init__(self, options: ReaderOptions, ops: Mapping[str, ConsumerOps],
                 reports: LossReports) -> None:
        self.options = options
        self.ops = ops  # the subscription's streams (they change under streamPattern)
        self.reports = reports
        # What each stream's group looked like when last probed, the streams this query
        # changed since (claims, reclaims, acks), and when every stream was last probed
        self.probed: dict[str, Probe] = {}
        self.dirty: set[str] = set()
        self.probed_all_at = float("-inf")
        # A planning probe ran since the last progress report: that report shows what it saw
        # (and the claims after it) without looking for news again
        self.planned_since_report = False
        # probes begun that read some group's state (claimed(), acked(): one that began after
        # a claim or an ack was sent may have seen it already)
        self.probes_begun = 0
        self._probing = threading.Lock()  # the pre-claim thread and the progress report
        self._marks = threading.Lock()  # dirty: the pre-claim thread, acks and probes

    def forget(self, names: Iterable[str]) -> None:
        """Streams that left the subscription."""
        for n in names:
            self.probed.pop(n, None)

    def probe(self, planning: bool = True) -> list[Probe]:
        """Every stream's group state, for one planning round's :meth:`reclaim_all` and
        :meth:`claim_new` (``planning``: where there is news, only as much as that decision
        needs) and for the progress report (one pipelined round trip per node).

        A quiet stream costs nothing of its own: an ``XREAD COUNT 1`` per 1,000 streams this
        query has not changed since its last probe (per slot on a cluster; pipelined, one
        round trip per node: :func:`.redisio.probes.news`), from the group's last delivered
        ID then, names those with new entries, and only they (and the streams this query
        claimed, reclaimed, acked or trimmed where that does not follow from the last probe)
        are probed; the others' last probe stands. Every stream is probed at least every
        ``claimMinIdleMs`` or ``discoveryIntervalMs``, whichever is shorter: what only that
        shows (entries of another consumer turning idle, entries trimmed or a group destroyed
        or moved on a stream that got nothing new) is seen within that time."""
        with self._probing:
            names = list(self.ops)
            before = self.probed_all_at
            with self._marks:
                dirty, self.dirty = self.dirty, set()  # marks made meanwhile: the next probe
            try:
                planned, self.planned_since_report = self.planned_since_report, planning
                ask, recheck = self._to_probe(names, dirty, look_for_news=planning or not planned)
                if not planning:  # progress: the streams last probed only for planning whose
                    # lag the stream's ends must check (Probe.lag_unsure); the others' lag is
                    # the server's as it is (a lag that said news where there was none was
                    # looked at in full by the planning probe: _to_probe's recheck)
                    known = set(ask)
                    recheck = [n for n in names if n not in known
                               and not (p := self.probed[n]).full and p.lag_unsure]
                if ask or recheck:  # it reads group states: claims and acks in flight may
                    with self._marks:  # show in them (claimed, acked)
                        self.probes_begun += 1
                fresh = probes.probe([self.ops[n] for n in ask], full=not planning)
                # a lag that said news where XREAD finds none (Redis 7.0's lag after a trim or
                # XDEL): looked at in full, or it would be claimed from every trigger
                ask += recheck
                fresh += probes.probe([self.ops[n] for n in recheck])
            except BaseException:
                self.probed_all_at = before
                self.planned_since_report = planned
                with self._marks:
                    self.dirty |= dirty
                raise
            for name, p in zip(ask, fresh, strict=True):
                self.probed[name] = p
                # What a deleted stream took unread (deleted()) is counted from the planning
                # probes only: a progress probe may run while the pre-claim claims
                if planning and p.group:
                    self.reports.observed(name, p)
            return [self.probed[n] for n in names]

    def _to_probe(self, names: list[str], dirty: set[str], look_for_news: bool = True
                  ) -> tuple[list[str], list[str]]:
        """The streams :meth:`probe` asks: every one, or those that may have changed; and
        the streams to look at in full (a lag that said news where XREAD finds none).
        ``look_for_news`` False (a progress report right after a planning probe, which looked
        for news and probed the streams that had some): only streams never probed, or changed
        by this query in a way their last probe cannot follow."""
        o = self.options
        now = time.monotonic()
        if (now - self.probed_all_at) * 1000 >= min(o.claim_min_idle_ms,
                                                    o.discovery_interval_ms):
            self.probed_all_at = now
            return names, []
        clean = [n for n in names if n not in dirty and (p := self.probed.get(n)) is not None
                 and p.group and p.last_delivered is not None]
        known = set(clean)
        if not look_for_news:
            return [n for n in names if n not in known], []
        try:
            news = probes.news([self.ops[n] for n in clean],
                                  [str(self.probed[n].last_delivered) for n in clean])
        except (EventBusConnectionError, ConfigError):  # ConfigError: e.g. an ACL refusal
            raise
        except EventBusError as exc:  # e.g. WRONGTYPE: a key replaced; every stream looks
            log.debug("spark-eventbus: looking for news failed, probing every stream: %s", exc)
            return names, []
        return ([n for n in names if n not in known or n in news],
                [n for n in clean if n not in news and not self.probed[n].full])

    def claimed(self, name: str, count: int, last: str | None, since: int | None = None
                ) -> None:
        """This query claimed ``count`` new entries of ``name``, up to ``last`` (``XREADGROUP
        >``): its group's state follows from its last probe (:func:`after_claim`), so neither
        the progress report nor the next planning round asks it again unless ``XREAD`` finds
        news after ``last``. Where it does not follow (an unknown lag, a probe running on
        the other thread that could overwrite it, or one that began since the claim was sent
        at generation ``since`` and may have seen it), the stream is probed again as
        :meth:`touched` does."""
        with self._marks:
            p = self.probed.get(name)
            stale = self._probing.locked() or (since is not None and since != self.probes_begun)
            self._follow(name, None if p is None or last is None or stale
                         else after_claim(p, count, last))

    def generation(self) -> int:
        """How many probes have begun: taken before acks are sent, for :meth:`acked`."""
        with self._marks:
            return self.probes_begun

    def acked(self, counts: Mapping[str, int], since: int) -> None:
        """This query acked ``counts[name]`` entries of each stream (the servers' counts),
        sent when :meth:`generation` was ``since``: its group's state follows from its last
        probe (:func:`after_ack`: that many fewer pending), so no probe asks it again for
        that. Where it does not follow (acks that delete the entries, ``XACKDEL``: the
        stream's length and ends moved; an unknown pending count; a probe that began since the
        acks were sent, which may have seen them already, or is running), the stream is probed
        again."""
        with self._marks:
            probing = self._probing.locked() or self.probes_begun != since
            for name, n in counts.items():
                p = self.probed.get(name)
                op = self.ops.get(name)
                self._follow(name, None if p is None or probing or op is None
                             or op.delete_acked else after_ack(p, n))

    def _follow(self, name: str, after: Probe | None) -> None:
        """Under ``_marks``: the stream's state as it follows from its last probe and this
        query's change, or (None: it does not follow) the stream marked for the next probe."""
        if after is None:
            self.dirty.add(name)
        else:
            self.probed[name] = after

    def touched(self, names: Iterable[str]) -> None:
        """This query changed these streams (a trim): the next probe asks them."""
        with self._marks:
            self.dirty.update(names)

    def stats(self) -> list[GroupStats]:
        """Progress of every stream (:meth:`probe`); unknowns when Redis stays unreachable
        past the client's retries (progress never fails a query)."""
        try:
            return [p.stats() for p in self.probe(planning=False)]
        except EventBusConnectionError as exc:
            log.warning("spark-eventbus: progress shows unknowns: %s", exc)
            return [GroupStats(None, None, None) for _ in self.ops]


def after_ack(p: Probe, count: int) -> Probe | None:
    """A group as probed (``p``), after this query's acks took ``count`` entries out of its
    pending list (``XACK``'s count): ``count`` fewer pending, nothing else moved. None where
    that does not follow (no group, an unknown pending count, fewer pending than acked: the
    probe is older than a claim it did not see)."""
    if not p.group or p.pending is None or p.pending < count:
        return None
    return replace(p, pending=p.pending - count)


def after_claim(p: Probe, count: int, last: str) -> Probe | None:
    """A group as probed (``p``), after this query's ``XREADGROUP >`` delivered ``count`` more
    entries, the last ``last``: ``count`` more pending and read, ``count`` less lag, delivered
    up to ``last``; with no lag left, every entry added has been delivered (a probe that finds
    a lag of 0 says the same). None where it does not follow: no group, an unknown lag or
    pending count, or a lag smaller than what was read (then the stream is probed again)."""
    if not p.group or p.lag is None or p.pending is None or p.lag < count:
        return None
    lag = p.lag - count
    read = None if p.entries_read is None else p.entries_read + count
    if lag == 0:
        return Probe(True, p.pending + count, 0, read, last,
                     p.last_generated if p.full and p.last_generated is not None else last,
                     p.newest, p.oldest, p.length, p.consumers)
    return Probe(True, p.pending + count, lag, read, last, p.last_generated, p.newest,
                 p.oldest, p.length, p.consumers, full=p.full)
