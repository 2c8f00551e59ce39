"""Where each batch of a read without a consumer group ends (driver): at each stream's last ID
when the entries added since its position fit the batch (one ``XINFO STREAM`` per stream,
nothing read), else after the first entries that fit, found by an ``XRANGE … COUNT`` on the
driver (so a backlog larger than a batch is read twice: once here for its IDs, once by the
tasks); the streams a pattern finds, and the progress report."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
)

from ..core.ids import StreamId
from ..core.planning import (
    MAX_CLAIM_CHUNK,
    entries_within,
    next_turn,
    share_budget,
    should_wait,
    stream_grants,
    takes_turns,
)
from ..core.positions import (
    Position,
    PositionOffset,
    Step,
    Tail,
    after_read,
    behind,
    starting_position,
    to_tail,
)
from ..errors import DataLossError
from ..options.reader import ReaderOptions
from ..redisio import discovery
from ..redisio.streams import entry_sizes, text
from ..redisio.tails import entries_after, ids_after_each, tails

log = logging.getLogger("spark_eventbus")

# Streams listed one by one in a progress report (the most behind first).
SHOWN_STREAMS = 100
# With maxBytesPerTrigger and no entry bound (Trigger.AvailableNow's ReadAllAvailable): the
# most entries sized for one stream in one batch (the rest goes to the next batch).
SIZING_READ = 100_000


@dataclass(frozen=True)
class _Ahead:
    """Where the next batch of a stream ends, found while Spark ran the previous one: the IDs
    of the ``grant`` entries after ``start`` (up to ``bound``, the stream as ``tail`` was)."""

    start: Position
    tail: Tail
    bound: Position
    ids: list[str]


class PositionPlanner:
    """The driver's side of a read without a group: which streams, and where each batch ends.
    Holds nothing that a restart needs: the offsets say it all."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self.spec = opts.read_connection
        self.names: list[str] = self._discover() if opts.stream_pattern else list(opts.streams)
        self.discovered_at = time.monotonic()
        # startingPosition of streams seen but in no offset yet: resolved once, kept until a
        # batch records them ("from"), so that a quiet trigger does not move them
        self.unrecorded: dict[str, Position] = {}
        self.stop_at: dict[str, Position] | None = None  # Trigger.AvailableNow's ends
        # Trigger.AvailableNow: what the look for its ends found, which the first plan uses
        # instead of asking every stream again (one XINFO STREAM per stream, not two)
        self.stop_tails: dict[str, Tail | None] | None = None
        self.last_tails: dict[str, Tail | None] = {}
        self.last_positions: dict[str, Position] = {}
        self.last_batch_at = time.monotonic()
        # streams take turns (planning.takes_turns): the last stream a batch served
        self.turn_after: str | None = None
        # Look-ahead: while Spark runs a batch cut before a stream's end, a thread finds where
        # the next one ends (the driver's XRANGE off the critical path); latestOffset joins it
        self.ahead: dict[str, _Ahead] = {}
        self.cuts: list[tuple[str, Position, Tail, Position, int]] = []
        self._ahead_thread: threading.Thread | None = None
        # readFrom=replica: streams whose replica is behind the query's position (not read
        # until it reaches it), since when, and whether that was said
        self.paused: dict[str, tuple[float, bool]] = {}

    def _discover(self) -> list[str]:
        assert self.opts.stream_pattern is not None
        self.discovered_at = time.monotonic()
        return discovery.discover(self.spec, self.opts.stream_pattern)

    def _rediscover(self) -> None:
        o = self.opts
        if o.stream_pattern is None or self.stop_at is not None or \
                (time.monotonic() - self.discovered_at) * 1000 < o.discovery_interval_ms:
            return
        names = self._discover()
        joined = sorted(set(names) - set(self.names))
        if joined:
            log.info("spark-eventbus: %d new streams match %r: %s", len(joined),
                     o.stream_pattern, ", ".join(joined[:10]))
        self.names = names

    def stop_at_tails(self) -> None:
        """``Trigger.AvailableNow``: read each stream up to its last ID now."""
        found = tails(self.spec, self.names)
        self.stop_at = {n: t.end for n, t in zip(self.names, found, strict=True) if t}
        self.stop_tails = dict(zip(self.names, found, strict=True))

    def _read_up(self, begin: PositionOffset) -> bool:
        """``Trigger.AvailableNow``: whether every stream is recorded and read up to where it
        ended when the trigger began, so that nothing is left to plan and Redis need not be
        asked (the trigger's last ``latestOffset``: one ``XINFO STREAM`` per stream saved).
        Entries added since are the next query's; a stream deleted since, with or without
        them, is that query's to see, as one deleted once this query stopped would be."""
        stop = self.stop_at
        if stop is None:
            return False
        for name in self.names:
            at = begin.streams.get(name)
            if at is None:
                return False
            end = stop.get(name)
            if end is not None and StreamId.parse(at.id) < StreamId.parse(end.id):
                return False
        return True

    def plan(self, start: dict, limit: ReadLimit) -> dict:
        """``latestOffset``: the next batch's end offset, or ``start`` when there is nothing
        to read."""
        o = self.opts
        begin = PositionOffset.from_json(start)
        self.join_ahead()
        ahead, self.ahead, self.cuts = self.ahead, {}, []
        self._rediscover()
        if not ahead and self._read_up(begin):
            self.stop_tails = None
            return start  # the very same object: Spark compares offsets as JSON text
        found, self.stop_tails = self.stop_tails, None
        if found is None:
            found = dict(zip(self.names, tails(self.spec, self.names), strict=True))
        self._vanished(begin, found)
        self.last_tails = found
        positions: dict[str, Position] = {}
        joined: dict[str, Position] = {}
        paused: set[str] = set()  # readFrom=replica: a replica behind the query's position
        for name in self.names:
            if name in begin.streams:
                at = positions[name] = begin.streams[name]
                again = self._behind(name, at, found[name])
                if again is None:
                    paused.add(name)
                elif again != at:  # recorded at once, as a stream that joins is
                    positions[name] = joined[name] = again
                continue
            if name not in self.unrecorded:
                self.unrecorded[name] = starting_position(o.starting_position.of(name),
                                                          found[name])
            positions[name] = joined[name] = self.unrecorded[name]
        self._say_paused(paused, positions, found)
        if o.stream_pattern is not None:  # streams deleted under a pattern leave
            positions = {n: p for n, p in positions.items() if found[n] is not None}
            joined = {n: p for n, p in joined.items() if found[n] is not None}
        self.last_positions = positions

        budget: int | None = None
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif not isinstance(limit, ReadAllAvailable):
            budget = o.max_entries_per_trigger
        bounds = {n: self._bound(n, t) for n, t in found.items()
                  if n in positions and n not in paused}
        if not joined and self._hold_back(limit, positions, bounds):
            return start
        steps = self._steps(positions, bounds, found, budget, ahead)
        ends = dict(positions)
        for name, step in steps.items():
            ends[name] = step.end
        whole = frozenset(n for n, s in steps.items() if s.expected is not None
                          and (t := found[n]) is not None and t.holes_after(positions[n].id))
        if not steps and not joined:
            return start  # the very same object: Spark compares offsets as JSON text
        # Streams that joined (or started again) are recorded at once, even with nothing to
        # read: a restart must not resolve their startingPosition again (a later 'latest'
        # would skip what arrived between). At a query's first trigger this empty batch also
        # makes Spark start the Python workers of its tasks before the first entries arrive.
        for name in joined:
            self.unrecorded.pop(name, None)
        self.last_positions = ends
        self.last_batch_at = time.monotonic()
        self._look_ahead()
        return PositionOffset(ends, joined, whole).to_json()

    def _look_ahead(self) -> None:
        """Start finding where the next batch of each stream cut short in this one ends:
        where what is left up to the bound is known to fit in this batch's share (its count),
        the next batch goes to the bound without a read, and nothing is looked for."""
        todo = [c for c in self.cuts if (left := behind(c[1], c[3])) is None or left > c[4]]
        if not todo:
            return

        def work() -> None:
            try:
                now = dict(zip([c[0] for c in todo], tails(self.spec, [c[0] for c in todo]),
                               strict=True))
                # as the driver's own read does: the stream, then XRANGE (pipelined)
                live = [c for c in todo if now[c[0]] is not None]
                pages = ids_after_each(self.spec, [(name, start.id, bound.id, want)
                                                   for name, start, _, bound, want in live],
                                       MAX_CLAIM_CHUNK)
                for (name, start, _, bound, want), ids in zip(live, pages, strict=True):
                    if len(ids) >= want:  # a whole share: the next batch ends there
                        tail = now[name]
                        assert tail is not None
                        self.ahead[name] = _Ahead(start, tail, bound, ids)
            except Exception as exc:  # the next latestOffset reads for itself
                log.debug("spark-eventbus: the look-ahead failed: %s", exc)

        self._ahead_thread = threading.Thread(target=work, name="eventbus-lookahead",
                                              daemon=True)
        self._ahead_thread.start()

    def join_ahead(self) -> None:
        if self._ahead_thread is not None:
            self._ahead_thread.join()
            self._ahead_thread = None

    def _vanished(self, begin: PositionOffset, found: dict[str, Tail | None]) -> None:
        """Streams deleted under the query (gone, or no longer found by the pattern) that held
        entries after the query's position when it last looked: those entries were never read
        (``failOnDataLoss``). A restart goes on without them (it never saw them)."""
        gone = []
        for name, at in begin.streams.items():
            last = self.last_tails.get(name)
            if found.get(name) is None and last is not None \
                    and StreamId.parse(last.last_id) > StreamId.parse(at.id):
                gone.append((name, behind(at, last.end)))
        if gone and self.spec.read_from_replicas:  # one replica may lack what another had
            primary = replace(self.spec, read_from_replicas=False)
            there = tails(primary, [n for n, _ in gone])
            gone = [g for g, tail in zip(gone, there, strict=True) if tail is None]
        if not gone:
            return
        shown = ", ".join(f"{n!r} ({'some' if k is None else k})" for n, k in gone[:10])
        message = (f"{len(gone)} stream(s) were deleted while this query (without a consumer "
                   f"group) had not read all of them; entries never read: {shown}.")
        for name, _ in gone:
            self.last_tails.pop(name, None)
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{message} A restart of the query goes on without them; set "
                                "option 'failOnDataLoss' to 'false' to log such losses and go "
                                "on (docs/data-loss.md).")
        log.warning("spark-eventbus: %s Going on without them (failOnDataLoss=false).", message)

    def _behind(self, name: str, at: Position, tail: Tail | None) -> Position | None:
        """A stream whose entries-added count is below the one at the query's position holds
        less than the query has seen: a failover to a replica that had not received entries
        the query already read, or the stream deleted and created again. Nothing the query has
        not read is lost by that (new entries get IDs after the stream's last); it goes on
        after its position, says so once, and counts again from the end of the next batch that
        reads to the stream's end: how many of the entries now there come after the position
        is not known (a new stream's entries may already lie past it, and are read at once).
        Reading from replicas, a replica that has not reached the position's ID may only be
        late: it is waited for instead (None, nothing read from the stream this trigger), as
        there is nothing after the position on it to read anyway; one that holds an entry past
        the position is not late (replication is in order: it would hold at least as many
        entries as were added up to the position)."""
        if tail is None or at.added is None or tail.added >= at.added:
            return at
        if self.spec.read_from_replicas \
                and StreamId.parse(tail.last_id) < StreamId.parse(at.id):
            return None
        log.warning(
            "spark-eventbus: stream %r has %d entries added (last ID %s), fewer than the %d "
            "at this query's position %s in it: entries the query already read are no longer "
            "in it (a failover to a replica that had not received them, or the stream deleted "
            "and created again). Going on after %s: entries it holds or is given with IDs at "
            "or before it (explicit IDs) are not read.", name, tail.added, tail.last_id, at.added,
            at.id, at.id)
        return Position(at.id)

    def _say_paused(self, paused: set[str], positions: dict[str, Position],
                    found: dict[str, Tail | None]) -> None:
        """A stream paused for longer than ``failoverTimeoutMs`` (its replica still behind
        the query's position) is said once, until it reads again."""
        now = time.monotonic()
        self.paused = {n: self.paused.get(n, (now, False)) for n in paused}
        for name, (since, said) in self.paused.items():
            if said or (now - since) * 1000 <= self.spec.failover_timeout_ms:
                continue
            self.paused[name] = (since, True)
            tail = found[name]
            log.warning(
                "spark-eventbus: stream %r: the replica read through %s has been behind this "
                "query's position %s for over failoverTimeoutMs (%d ms; its last ID: %s). "
                "Nothing is read from the stream until it gets there: a replica that lags is "
                "waited for. (Were the stream created again on the primary with explicit IDs "
                "at or before the position, those entries would not be read.)", name,
                self.spec.display, positions[name].id, self.spec.failover_timeout_ms,
                tail.last_id if tail is not None else "none")

    def _bound(self, name: str, tail: Tail | None) -> Position | None:
        """How far this batch may read the stream: its last ID, or under
        ``Trigger.AvailableNow`` its last ID when the trigger began."""
        if self.stop_at is not None:
            return self.stop_at.get(name)
        return None if tail is None else tail.end

    def _hold_back(self, limit: ReadLimit, positions: dict[str, Position],
                   bounds: dict[str, Position | None]) -> bool:
        """``minEntriesPerTrigger``: wait while fewer entries were added since the positions
        (never when a count is unknown, never under ``Trigger.AvailableNow``, never past
        ``maxTriggerDelay``)."""
        o = self.opts
        if o.min_entries_per_trigger is None or self.stop_at is not None \
                or isinstance(limit, ReadAllAvailable):
            return False
        counts = [behind(positions[n], b) for n, b in bounds.items()]
        available = None if None in counts else sum(c or 0 for c in counts)
        waited_ms = (time.monotonic() - self.last_batch_at) * 1000
        return should_wait(o.min_entries_per_trigger, available, waited_ms,
                           o.max_trigger_delay_ms)

    def _steps(self, positions: dict[str, Position], bounds: dict[str, Position | None],
               found: dict[str, Tail | None], budget: int | None,
               ahead: dict[str, _Ahead]) -> dict[str, Step]:
        """Where each stream's part of the batch ends, within ``budget`` entries and
        ``maxBytesPerTrigger``: shares of the budget by what each stream has, to the bound
        where it fits, else after the entries that fit (a driver-side ``XRANGE``, or what the
        look-ahead found while the previous batch ran: ``ahead``). Streams cut short are noted
        in :attr:`cuts` for the next look-ahead."""
        names = [n for n, b in bounds.items() if b is not None and found[n] is not None
                 and StreamId.parse(b.id) > StreamId.parse(positions[n].id)]
        gaps = [behind(positions[n], bounds[n]) for n in names]
        if budget is None:
            grants: list[int | None] = [None] * len(names)
        elif takes_turns(budget, len(names)):
            # Too many streams with news for a share each worth its cost: they take turns
            # from where the last batch stopped, each up to MIN_SHARE entries (a stream that
            # fits whole needs no read here to find its cut)
            k = next_turn(self.names, names, self.turn_after)
            names, gaps = names[k:] + names[:k], gaps[k:] + gaps[:k]
            grants = list(stream_grants(budget, gaps))
            served = [n for n, g in zip(names, grants, strict=True) if g]
            self.turn_after = served[-1] if served else self.turn_after
        else:
            grants = list(share_budget(budget, [budget if g is None else g for g in gaps]))
        bytes_left = self.opts.max_bytes_per_trigger
        steps: dict[str, Step] = {}
        short: list[tuple[str, Position, Tail, Position, int | None, int]] = []
        for name, gap, grant in zip(names, gaps, grants, strict=True):
            start, bound, tail = positions[name], bounds[name], found[name]
            assert bound is not None and tail is not None
            if grant == 0:
                continue
            if bytes_left is None and (grant is None or (gap is not None and gap <= grant)):
                steps[name] = to_tail(start, bound)  # nothing read here
                continue
            seen = ahead.get(name)
            if bytes_left is None and grant is not None and seen is not None \
                    and seen.start == start and len(seen.ids) >= grant:
                steps[name] = step = after_read(start, seen.tail, seen.bound, seen.ids[:grant],
                                                False)
                self.cuts.append((name, step.end, tail, bound, grant))
                continue
            want = grant if grant is not None else SIZING_READ
            if bytes_left is None:
                short.append((name, start, tail, bound, grant, want))  # read together below
                continue
            # maxBytesPerTrigger: the budget is shared in order, stream by stream
            ids: list[str] = []
            full = True  # every entry read so far is in the batch
            for page in entries_after(self.spec, name, start.id, bound.id, want,
                                      MAX_CLAIM_CHUNK):
                sizes = entry_sizes(page)
                cut = entries_within(sizes, bytes_left, not steps and not ids)
                bytes_left -= sum(sizes[:cut])
                ids += [text(e[0]) for e in page[:cut]]
                if cut < len(page):
                    full = False
                    break
            self._step(steps, name, start, tail, bound, grant, ids, full and len(ids) < want)
            if not ids and bytes_left <= 0:
                break
        # Without a byte budget every stream's read is independent: pipelined, one round trip
        # per node for many streams (many streams sharing a budget), not one per stream
        pages = ids_after_each(self.spec, [(name, start.id, bound.id, want)
                                           for name, start, _, bound, _, want in short],
                               MAX_CLAIM_CHUNK)
        for (name, start, tail, bound, grant, want), ids in zip(short, pages, strict=True):
            self._step(steps, name, start, tail, bound, grant, ids, len(ids) < want)
        return steps

    def _step(self, steps: dict[str, Step], name: str, start: Position, tail: Tail,
              bound: Position, grant: int | None, ids: list[str], reached: bool) -> None:
        """Where the batch of stream ``name`` ends, the entries after ``start`` that it takes
        read (``ids``; ``reached``: up to ``bound``, nothing left before it); a stream cut
        short is noted in :attr:`cuts` for the next look-ahead."""
        if not ids:
            if reached:  # every entry up to the bound was deleted: the batch ends there,
                steps[name] = to_tail(start, bound)  # and its task counts them lost
            return
        steps[name] = after_read(start, tail, bound, ids, reached)
        if not reached and self.opts.max_bytes_per_trigger is None and grant is not None:
            self.cuts.append((name, steps[name].end, tail, bound, grant))

    def progress(self) -> dict[str, Any]:
        """``reportLatestOffset``: per stream, the entries added after its position (None: not
        known), the most behind first; totals under ``_eventbus``."""
        rows = []
        for name, at in self.last_positions.items():
            tail = self.last_tails.get(name)
            rows.append((name, behind(at, tail.end if tail else None), at.id))
        known = [b for _, b, _ in rows if b is not None]
        rows.sort(key=lambda r: -(r[1] or 0))
        out: dict[str, Any] = {name: {"entriesBehind": b, "position": at}
                               for name, b, at in rows[:SHOWN_STREAMS]}
        out["_eventbus"] = {
            "group": None, "streams": len(rows),
            "streamsNotShown": max(0, len(rows) - SHOWN_STREAMS),
            "entriesBehind": sum(known) if len(known) == len(rows) else None,
            "entriesBehindUnknown": len(rows) - len(known)}
        return out
