"""Driver side: the consumer lease — one live query per (stream, group, consumer).

Two live queries with one consumer would share its pending entries and claim plan. A query
takes a lease on each of its streams before its first claim (``lua/lease.lua``), renews it from
a heartbeat thread, and gives it back when it stops. A query that finds the lease held waits up
to :data:`LEASE_TTL_MS` before deciding: a holder that was killed lets it expire, a live one
renews it (the query is then refused, naming option ``consumer``). A driver restarted from the
same checkpoint (same run) takes its lease over at once.

A query over many streams (``planning.MANY_STREAMS`` or more, or a ``streamPattern``) would
renew one lease per stream every few seconds. Its leases say so (``'<run> <owner> hb'``) and
live long (:data:`LEASE_KEY_TTL_MS`, renewed rarely); whether it is alive is one heartbeat key
per query (``keys.alive_key`` of its ``owner``), renewed every :data:`LEASE_RENEW_S` with the
same TTL: a query that finds such a lease held reads the holder's heartbeat, and takes the lease
over ('steal') only once it has expired. The per-query work then does not grow with streams.
A query whose own heartbeat had expired when it renewed it (a stalled driver) renews every lease
at once, so it notices a takeover as a query with short leases would. An ACL user that may not
write the heartbeat key keeps one short lease per stream.

The lease also fences claims: ``claim.lua`` and ``reclaim.lua`` run only while the lease still
names this query (``lease_fence`` in ``lua/_lib.lua``). A query that could not renew for longer
than the TTL (a stalled driver, a partition from Redis) and was taken over meanwhile claims
nothing more: its next claim fails naming option ``consumer``, before its heartbeat notices.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping

from .errors import ConfigError, EventBusError
from .redisio import ConnectionSpec, ConsumerOps, consumer_taken_over, leases

log = logging.getLogger("spark_eventbus")

# A live query renews every LEASE_RENEW_S; a query killed with kill -9 keeps a successor with
# another checkpoint out for at most LEASE_TTL_MS.
LEASE_TTL_MS = 15_000
LEASE_RENEW_S = LEASE_TTL_MS / 3000
# Heartbeat leases (many streams): the lease keys' own lifetime, renewed every quarter of it.
LEASE_KEY_TTL_MS = 10 * 60_000


class ConsumerLease:
    """The leases of one query's consumer on each of its streams (driver process)."""

    def __init__(self, ops: Mapping[str, ConsumerOps], group: str, consumer: str,
                 spec: ConnectionSpec, heartbeat: bool = False) -> None:
        self.ops = ops
        self.spec = spec
        self.group = group
        self.consumer = consumer
        self.owner = uuid.uuid4().hex[:12]  # this query's driver (one per ConsumerLease)
        # many streams: leases named '... hb', kept alive by one heartbeat key (module doc)
        self.heartbeat = heartbeat
        self._renewed_all = time.monotonic()
        self.run: str | None = None  # the run whose leases are held
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: EventBusError | None = None  # set by the heartbeat

    def hold(self, run: str) -> None:
        """Before any claim: take the lease on every stream, or raise :class:`ConfigError`
        naming option ``consumer``. Idempotent per run; raises if another query took over."""
        if self._lost is not None:
            raise self._lost
        if self.run == run:
            return
        if self._thread is None:
            if self.heartbeat:
                self._start_heartbeat()
            self._thread = threading.Thread(target=self._renew, name="eventbus-lease",
                                            daemon=True)
            self._thread.start()
        self._take(dict(self.ops), run)
        self.run = run

    def join(self, ops: list[ConsumerOps], run: str) -> None:
        """Streams that joined a pattern subscription: take their leases as :meth:`hold` does
        (a lease another live query holds raises :class:`ConfigError`)."""
        self._take({op.stream: op for op in ops}, run)

    def leave(self, ops: list[ConsumerOps], run: str) -> None:
        """Streams that left a pattern subscription: give their leases back."""
        for op in ops:
            op.lease_token = ""
        try:
            leases.leases(ops, "release", run, self.owner, self._ttl(), self.heartbeat)
        except EventBusError as exc:
            log.debug("spark-eventbus: could not release the consumer leases: %s", exc)

    def _take(self, ops: dict[str, ConsumerOps], run: str) -> None:
        # One pipelined acquire of every lease; only those another query holds are waited for.
        first = leases.leases(list(ops.values()), "acquire", run, self.owner, self._ttl(),
                                 self.heartbeat)
        for (name, op), (status, holder, pttl) in zip(ops.items(), first, strict=True):
            if status == "held":
                status, holder, _ = self._acquire(op, run, (status, holder, pttl))
            if status == "held":
                # Give back what the pipelined acquire took (a lease held by another query is
                # left alone: lease.lua releases only its own).
                self._give_back_all(run)
                raise ConfigError(
                    f"option 'consumer' = {self.consumer!r} of group {self.group!r} on stream "
                    f"{name!r} is in use by another running query (checkpoint run "
                    f"{holder.split(' ')[0]}); two live queries with one consumer would share "
                    "its pending entries and claim plan. Give each concurrent query its own "
                    ".option('consumer', …), or stop the other query. (It renewed its lease, "
                    "or its heartbeat, while this query waited up to "
                    f"{self._wait_s():.0f} s for it: it is alive.)")
            if status == "takeover":
                log.warning("spark-eventbus: taking over consumer %r of group %r on stream %r "
                            "from an earlier driver of this checkpoint", self.consumer,
                            self.group, name)
        for op in ops.values():  # claims now run only while the lease is still ours
            op.lease_token = f"{run} {self.owner}" + (" hb" if self.heartbeat else "")
        self._renewed_all = time.monotonic()

    def _ttl(self) -> int:
        return LEASE_KEY_TTL_MS if self.heartbeat else LEASE_TTL_MS

    @staticmethod
    def _wait_s() -> float:
        """How long a held lease is waited for: its TTL and a beat (a holder killed just
        after it renewed lets it expire within that)."""
        return LEASE_TTL_MS / 1000 + LEASE_RENEW_S

    def _start_heartbeat(self) -> None:
        """Before the first lease: this process's heartbeat. A user whose ACL rule does
        not cover it (no ``~{eventbus:*}:eventbus:alive``) keeps one short lease per stream
        instead."""
        try:
            leases.heartbeat(self.spec, self.owner, LEASE_TTL_MS)
        except ConfigError as exc:
            self.heartbeat = False
            log.warning("spark-eventbus: the Redis user may not write the consumer leases' "
                        "heartbeat key, so each stream's lease is renewed every %.0f s (one "
                        "command per stream); add ~{eventbus:*}:eventbus:alive to its ACL rule "
                        "(eventbus acl-rule streaming-reader): %s", LEASE_RENEW_S, exc)

    def _acquire(self, op: ConsumerOps, run: str, first: tuple[str, str, int]
                 ) -> tuple[str, str, int]:
        """Take the lease (``first``: the first attempt's reply); while another query holds
        it, wait up to its TTL: a holder that was killed lets it (or its heartbeat) expire
        (then it is ours), a live one renews it (then it stays 'held')."""
        status, holder, pttl = first
        deadline = time.monotonic() + self._wait_s()
        last: int | None = None
        watched = holder
        while status == "held" and time.monotonic() < deadline:
            parts = holder.split(" ")
            if holder != watched:
                last, watched = None, holder
            if len(parts) > 2 and parts[2] == "hb":  # alive while its heartbeat is
                try:
                    beat = leases.heartbeat_ms(self.spec, parts[1])
                except ConfigError as exc:  # NOPERM: a rule without the heartbeat pattern
                    raise ConfigError(
                        f"stream {op.stream!r}: option 'consumer' = {self.consumer!r} of group "
                        f"{self.group!r} is held by a query over many streams (checkpoint run "
                        f"{parts[0]}), which is alive while its heartbeat key is, and this "
                        "Redis user may not read that key: add ~{eventbus:*}:eventbus:alive "
                        "to its ACL rule (eventbus acl-rule streaming-reader), or give this "
                        f"query its own .option('consumer', …). ({exc})") from exc
                if beat == -2:  # expired: the holder is gone, its lease is ours
                    status, holder, pttl = leases.leases([op], "steal", run, self.owner,
                                                          self._ttl(), self.heartbeat,
                                                          holder)[0]
                    continue
                if last is not None and beat > last + 500:
                    break  # renewed: its holder is alive
                last = beat
                time.sleep(0.25)
                continue
            time.sleep(0.25)
            before = pttl
            status, holder, pttl = leases.leases([op], "acquire", run, self.owner,
                                                  self._ttl(), self.heartbeat)[0]
            if status == "held" and pttl > before + 500 and \
                    not holder.endswith(" hb"):
                break  # renewed: its holder is alive
        return status, holder, pttl

    def _renew(self) -> None:
        """Heartbeat: renew until :meth:`release`; record a takeover for :meth:`hold` to raise.
        Redis errors are retried at the next beat (the lease outlives two missed beats). With
        a heartbeat key, the leases themselves are renewed every quarter of their lifetime."""
        while not self._stop.wait(LEASE_RENEW_S):
            run = self.run
            ops = dict(self.ops)  # a snapshot: streams join and leave (streamPattern)
            try:  # one pipelined round trip per node, not one per stream
                if self.heartbeat:
                    # a heartbeat that had expired (a stalled driver): another query may have
                    # taken the leases over; renew them all now to find out
                    lapsed = not leases.heartbeat(self.spec, self.owner, LEASE_TTL_MS)
                    if not lapsed and \
                            (time.monotonic() - self._renewed_all) * 4000 < LEASE_KEY_TTL_MS:
                        continue
                if run is None:
                    continue
                replies = leases.leases(list(ops.values()), "renew", run, self.owner,
                                           self._ttl(), self.heartbeat)
                self._renewed_all = time.monotonic()
            except EventBusError as exc:
                log.debug("spark-eventbus: could not renew the consumer leases: %s", exc)
                continue
            for name, (status, holder, _) in zip(ops, replies, strict=True):
                if status == "lost":
                    self._lost = consumer_taken_over(self.consumer, self.group, name, holder)
                    return

    def release(self) -> None:
        """Stop renewing and give every lease back (best effort: they expire on their own)."""
        self._stop.set()
        for op in self.ops.values():
            op.lease_token = ""
        if self._thread is not None:  # wakes at once; a renewal in flight could re-create
            self._thread.join()       # the lease after the release below
        if self.run is not None:
            self._give_back_all(self.run)

    def _give_back_all(self, run: str) -> None:
        try:
            leases.leases(list(self.ops.values()), "release", run, self.owner,
                             self._ttl(), self.heartbeat)
            if self.heartbeat:
                leases.stop_heartbeat(self.spec, self.owner)
        except EventBusError as exc:
            log.debug("spark-eventbus: could not release the consumer leases: %s", exc)
