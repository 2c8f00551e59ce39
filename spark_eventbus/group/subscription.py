"""Which streams a query reads (driver), as Spark's Kafka source has its ``ConsumerStrategy``:
the streams of option ``stream`` (fixed), or those matching ``streamPattern``, looked for again
every ``discoveryIntervalMs``. A stream joins with its group created at ``startingPosition``
if missing; a stream that no longer matches and no longer exists leaves.

What joining and leaving mean for the consumer leases and the bookkeeping is the driver's
(:meth:`.driver.ReaderDriver.rediscover`); this module only keeps the list."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ..options.reader import ReaderOptions
from ..redisio import ConsumerOps, discovery, ensure_groups

log = logging.getLogger("spark_eventbus")


class Subscription:
    def __init__(self, opts: ReaderOptions, delete_acked: bool = False) -> None:
        assert opts.group is not None
        self.opts = opts
        self.delete_acked = delete_acked  # acks delete what every group acked (XACKDEL)
        # The streams read, by name: one ConsumerOps each. The claimer, the lease and the
        # probe cache hold this very dict (streams join and leave between batches only).
        self.ops: dict[str, ConsumerOps] = {}
        self.discovered_at = time.monotonic()
        names = opts.streams if opts.stream_pattern is None else self._discover()
        self.join(names)

    def _discover(self) -> list[str]:
        o = self.opts
        assert o.stream_pattern is not None
        self.discovered_at = time.monotonic()
        exclude = [o.dead_letter_stream] if o.dead_letter_stream else []
        return discovery.discover(o.connection, o.stream_pattern, exclude)

    def join(self, names: Sequence[str]) -> list[ConsumerOps]:
        """Streams join: their groups are created at ``startingPosition`` if missing. Returns
        those that were not subscribed yet."""
        o = self.opts
        assert o.group is not None
        spec = o.connection  # made from the options at each use: once here, not per stream
        new = [ConsumerOps(spec, s, o.group, o.consumer_name,
                           cache_ack_ids=o.ack_mode == "commit",
                           delete_acked=self.delete_acked)
               for s in dict.fromkeys(names) if s not in self.ops]
        existing = []
        at = o.starting_position
        for op, made in zip(new, ensure_groups(new, [at.of(op.stream) for op in new]),
                            strict=True):
            if made:
                log.info("spark-eventbus: created consumer group %r on stream %r at %s",
                         o.group, op.stream, at.of(op.stream))
            elif at.given(op.stream):  # the user gave its position (by name, '*', or all)
                existing.append(op.stream)
            self.ops[op.stream] = op
        if existing:
            shown = ", ".join(repr(s) for s in existing[:5]) + (
                f" and {len(existing) - 5} more" if len(existing) > 5 else "")
            wanted = {at.of(s) for s in existing}
            log.warning(
                "spark-eventbus: option 'startingPosition' = %s is ignored for stream(s) %s: "
                "consumer group %r exists there already and reads on from where it is "
                "(startingPosition applies only when the query creates the group). To move "
                "it: eventbus group seek --stream <stream> --group %s --to %s (while no query "
                "reads the group).",
                repr(next(iter(wanted))) if len(wanted) == 1 else "(per stream)", shown,
                o.group, o.group,
                next(iter(wanted)) if len(wanted) == 1 else "<its position>")
        return new

    def due(self) -> bool:
        """``streamPattern``: whether ``discoveryIntervalMs`` has passed since the last look."""
        o = self.opts
        return o.stream_pattern is not None and \
            (time.monotonic() - self.discovered_at) * 1000 >= o.discovery_interval_ms

    def refresh(self) -> tuple[list[ConsumerOps], list[str]]:
        """Look for the pattern's streams again: (the streams that left, the names that match
        now, for :meth:`join` once the driver has seen the others leave). A stream not found by
        ``SCAN`` leaves only once confirmed gone (a cluster SCAN can miss a key being
        migrated)."""
        names = self._discover()
        found = set(names)
        gone = discovery.missing([op for s, op in self.ops.items() if s not in found])
        return [self.ops.pop(s) for s in gone], names
