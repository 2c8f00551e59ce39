"""Driver side: the consumer lease — one live query per (stream, group, consumer).

Two live queries with one consumer would share its pending entries and claim plan. A query
takes a lease on each of its streams before its first claim (``lua/lease.lua``) and gives it
back when it stops. Whether the query holding a lease is alive is one heartbeat key per query
(``keys.alive_key`` of its ``owner``), renewed every :data:`LEASE_RENEW_S` with a TTL of
:data:`LEASE_TTL_MS`; the leases themselves live long (:data:`LEASE_KEY_TTL_MS`, renewed
every quarter of it), so the per-query work does not grow with its streams. A query that finds a
lease held reads the holder's heartbeat: it takes the lease over ('steal') once that has
expired (a holder killed with kill -9), and is refused, naming option ``consumer``, while it is
renewed (a live holder). A driver restarted from the same checkpoint (same run) takes its lease
over at once. A query whose own heartbeat had expired when it renewed it (a stalled driver)
renews every lease at once, and so notices a takeover.

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

from ..errors import ConfigError, EventBusError
from ..redisio import ConnectionSpec, ConsumerOps, consumer_taken_over, leases
from ..redisio.leases import LEASE_KEY_TTL_MS

log = logging.getLogger("spark_eventbus")

# A live query renews its heartbeat every LEASE_RENEW_S; a query killed with kill -9 keeps a
# successor with another checkpoint out for at most LEASE_TTL_MS.
LEASE_TTL_MS = 15_000
LEASE_RENEW_S = LEASE_TTL_MS / 3000


class ConsumerLease:
    """The leases of one query's consumer on each of its streams (driver process)."""

    def __init__(self, ops: Mapping[str, ConsumerOps], group: str, consumer: str,
                 spec: ConnectionSpec) -> None:
        self.ops = ops
        self.spec = spec
        self.group = group
        self.consumer = consumer
        self.owner = uuid.uuid4().hex[:12]  # this query's driver (one per ConsumerLease)
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
            self._start_heartbeat()
            self._thread = threading.Thread(target=self._renew, name="eventbus-lease",
                                            daemon=True)
            self._thread.start()
        self._take(dict(self.ops), run)
        self._renewed_all = time.monotonic()  # every lease just written: the next in 2.5 min
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
            leases.leases(ops, "release", run, self.owner)
        except EventBusError as exc:
            self._not_given_back("of the streams that left", exc)

    def _take(self, ops: dict[str, ConsumerOps], run: str) -> None:
        # One pipelined acquire of every lease; only those another query holds are waited for.
        first = leases.leases(list(ops.values()), "acquire", run, self.owner)
        for (name, op), (status, holder, _) in zip(ops.items(), first, strict=True):
            if status == "held":
                status, holder = self._acquire(op, run, holder)
            if status == "held":
                # Give back what the pipelined acquire took (a lease held by another query is
                # left alone: lease.lua releases only its own).
                self._give_back_all(run)
                raise ConfigError(
                    f"option 'consumer' = {self.consumer!r} of group {self.group!r} on stream "
                    f"{name!r} is in use by another running query (checkpoint run "
                    f"{holder.split(' ')[0]}); two live queries with one consumer would share "
                    "its pending entries and claim plan. Give each concurrent query its own "
                    ".option('consumer', …), or stop the other query. (It renewed its "
                    "heartbeat while this query waited up to "
                    f"{self._wait_s():.0f} s for it: it is alive.)")
            if status == "takeover":
                log.warning("spark-eventbus: taking over consumer %r of group %r on stream %r "
                            "from an earlier driver of this checkpoint", self.consumer,
                            self.group, name)
        for op in ops.values():  # claims now run only while the lease is still ours
            op.lease_token = f"{run} {self.owner}"

    @staticmethod
    def _wait_s() -> float:
        """How long a held lease is waited for: the heartbeat's TTL and a beat (a holder
        killed just after it renewed lets its heartbeat expire within that)."""
        return LEASE_TTL_MS / 1000 + LEASE_RENEW_S

    def _start_heartbeat(self) -> None:
        """Before the first lease: this process's heartbeat key."""
        try:
            leases.heartbeat(self.spec, self.owner, LEASE_TTL_MS)
        except ConfigError as exc:  # an ACL rule without the heartbeat keys
            raise ConfigError(
                "the Redis user may not write the consumer leases' heartbeat key (one per "
                "query, which tells whether it is alive): add ~{eventbus:*}:eventbus:alive to "
                "its ACL rule, as `eventbus acl-rule --role streaming-reader` prints it. "
                f"({exc})") from exc

    def _acquire(self, op: ConsumerOps, run: str, holder: str) -> tuple[str, str]:
        """Take the lease that ``holder`` (another query) held at the first attempt: watch
        the holder's heartbeat up to its TTL: once it has expired (a holder that was
        killed) the lease is ours, while it is renewed (a live holder) it stays 'held'."""
        status = "held"
        deadline = time.monotonic() + self._wait_s()
        last: int | None = None
        watched = holder
        while status == "held" and time.monotonic() < deadline:
            if holder != watched:
                last, watched = None, holder
            beat = leases.heartbeat_ms(self.spec, [*holder.split(" "), ""][1])
            if beat == -2:  # expired: the holder is gone, its lease is ours
                status, holder, _ = leases.leases([op], "steal", run, self.owner, holder)[0]
                continue
            if last is not None and beat > last + 500:
                break  # renewed: its holder is alive
            last = beat
            time.sleep(0.25)
        return status, holder

    def _renew(self) -> None:
        """Heartbeat: renew until :meth:`release`; record a takeover for :meth:`hold` to raise.
        Redis errors are retried at the next beat (the heartbeat outlives two missed beats);
        the leases themselves are renewed every quarter of their lifetime."""
        while not self._stop.wait(LEASE_RENEW_S):
            run = self.run
            ops = dict(self.ops)  # a snapshot: streams join and leave (streamPattern)
            try:  # one pipelined round trip per node, not one per stream
                # a heartbeat that had expired (a stalled driver): another query may have
                # taken the leases over; renew them all now to find out
                lapsed = not leases.heartbeat(self.spec, self.owner, LEASE_TTL_MS)
                if not lapsed and \
                        (time.monotonic() - self._renewed_all) * 4000 < LEASE_KEY_TTL_MS:
                    continue
                if run is None:
                    continue
                replies = leases.leases(list(ops.values()), "renew", run, self.owner)
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
            leases.leases(list(self.ops.values()), "release", run, self.owner)
            leases.stop_heartbeat(self.spec, self.owner)
        except EventBusError as exc:
            self._not_given_back("of this query", exc)

    def _not_given_back(self, which: str, exc: EventBusError) -> None:
        log.warning("spark-eventbus: could not give back the consumer leases %s: %s (they "
                    "expire on their own; until then a query with consumer %r on those streams "
                    "waits for them up to %.0f s)", which, exc, self.consumer, self._wait_s())
