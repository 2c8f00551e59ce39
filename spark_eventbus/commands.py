"""The Redis command layer: one method per operation, Lua scripts loaded by name.

Everything here runs on the driver unless its docstring says otherwise, talks to one stream of
one consumer group, and translates redis-py errors into :mod:`spark_eventbus.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

from .connection import ConnectionSpec, client
from .errors import NotAStreamError, translate
from .ids import StreamId
from .keys import lease_key, plan_key
from .offsets import Chunk, StreamBatch

_SCRIPT_NAMES = ("claim", "reclaim", "ack_range", "lease")

# IDs of claimed chunks kept on the driver (RESP-encoded, ~22 bytes each) so that acking a
# committed chunk is one plain XACK of its IDs: ~0.5 us/ID of Redis CPU instead of ~1.3 us/ID
# for ack_range (XPENDING + XACK inside Lua), measured on Redis 7.0. Chunks beyond this budget,
# and chunks of plans left by an earlier driver, are acked with ack_range.
ACK_ID_CACHE_BYTES = 64 * 1024 * 1024


def _script_text(name: str) -> str:
    lua = resources.files("spark_eventbus") / "lua"
    return (lua / "_lib.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stream_exists(r: redis.Redis, key: str, fix: str = "") -> bool:
    """True for a stream, False for a missing key; any other type raises
    :class:`NotAStreamError` — spark-eventbus never overwrites it (``fix`` ends the message)."""
    kind = _s(r.type(key))
    if kind not in ("stream", "none"):
        raise NotAStreamError(f"key {key!r} holds a {kind}, not a stream; spark-eventbus never "
                              f"overwrites it.{' ' + fix if fix else ''}")
    return kind == "stream"


@dataclass(frozen=True)
class ClaimResult:
    status: str  # ok, empty, done, loss, nogroup
    chunk: Chunk | None
    lost_after: str  # entries after this ID ...
    lost_before: str  # ... and before this one ('' unknown; '(' prefix: up to and including)
    lost_count: int  # -1: unknown


@dataclass(frozen=True)
class ReclaimResult:
    cursor: str
    taken: tuple[tuple[str, int], ...]
    dead_lettered: int
    deleted: tuple[str, ...]


@dataclass(frozen=True)
class GroupStats:
    pending: int | None
    lag: int | None  # None: unknown (Redis 7.0 after XDEL/trim, or Redis < 7)
    last_delivered: str | None


class StreamOps:
    """Operations on one stream for one group/consumer."""

    def __init__(self, spec: ConnectionSpec, stream: str, group: str, consumer: str,
                 cache_ack_ids: bool = False) -> None:
        self.spec = spec
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.plan_key = plan_key(stream, group, consumer)
        self.lease_key = lease_key(stream, group, consumer)
        self.redis = client(spec)
        self._scripts: dict[str, Script] = {
            name: self.redis.register_script(_script_text(name)) for name in _SCRIPT_NAMES
        }
        self.cache_ack_ids = cache_ack_ids
        self._ack_ids: dict[Chunk, bytes] = {}  # claimed chunk -> its IDs, RESP bulk strings
        self._ack_ids_bytes = 0
        stream_b, group_b = stream.encode(), group.encode()
        self._xack_args = (b"$%d\r\n%s\r\n$%d\r\n%s\r\n"
                           % (len(stream_b), stream_b, len(group_b), group_b))

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise translate(exc, f"{what} (stream {self.stream!r}, group {self.group!r}, "
                                 f"url {self.spec.display})", self.spec.secrets) from exc

    # -- setup ---------------------------------------------------------------------------------

    def ensure_group(self, starting_position: str) -> bool:
        """Create the group (and the stream, ``MKSTREAM``) if missing. Idempotent.

        Refuses a key that is not a stream. ``earliest`` starts just before the first entry
        still in the stream, so entries trimmed long before the group existed are not reported
        as lost. Returns True when this call created the group.
        """
        with self._errors("creating the consumer group"):
            if stream_exists(self.redis, self.stream,
                             f"Server: {self.spec.display}. Choose another 'stream' option."):
                for g in self.redis.xinfo_groups(self.stream):
                    if _s(g["name"]) == self.group:
                        return False
            args: list[Any] = ["XGROUP", "CREATE", self.stream, self.group]
            pos = starting_position
            if pos in ("latest", "$"):
                args.append("$")
            elif pos in ("earliest", "0"):
                start, entries_read = self._before_first_entry()
                args += [start, "MKSTREAM", "ENTRIESREAD", entries_read]
            else:
                args.append(pos)
            if "MKSTREAM" not in args:
                args.append("MKSTREAM")
            try:
                self.redis.execute_command(*args)
            except redis.ResponseError as exc:
                if "BUSYGROUP" in str(exc):  # another query created it meanwhile
                    return False
                if "ENTRIESREAD" in str(exc) or "syntax" in str(exc).lower():
                    # Redis < 7.0: no ENTRIESREAD (lag is then unknown anyway).
                    self.redis.execute_command(*args[: args.index("MKSTREAM") + 1])
                    return True
                raise
            return True

    def _before_first_entry(self) -> tuple[str, int]:
        if _s(self.redis.type(self.stream)) == "none":
            return "0", 0
        info = self.redis.xinfo_stream(self.stream)
        first = info.get("first-entry")
        if not first:
            # Empty stream: everything after the last generated ID is new.
            return _s(info["last-generated-id"]), int(info.get("entries-added", 0))
        first_id = StreamId.parse(first[0])
        added = info.get("entries-added")
        read = int(added) - int(info["length"]) if added is not None else 0
        return str(first_id.prev()), max(0, read)

    # -- consumer lease ------------------------------------------------------------------------

    def lease(self, mode: str, run: str, owner: str, ttl_ms: int) -> tuple[str, str, int]:
        """Acquire, renew or release this consumer's lease (``lua/lease.lua``).

        Returns (status, holder, holder's remaining ms): status ``ok``, ``takeover``, ``held``
        or ``lost``; holder is ``'<run> <owner>'`` of the query that has it.
        """
        with self._errors("checking the consumer lease"):
            status, holder, pttl = self._scripts["lease"](
                keys=[self.lease_key], args=[mode, run, owner, ttl_ms])
        return _s(status), _s(holder), int(pttl)

    # -- claim plan ----------------------------------------------------------------------------

    def load_plan(self, run: str, seq: int) -> StreamBatch:
        """What was already claimed for batch (run, seq): pre-claimed, or left by a crash."""
        with self._errors("reading the claim plan"):
            raw = self.redis.hget(self.plan_key, str(seq))
        if raw is None:
            return StreamBatch()
        plan = json.loads(raw)
        if plan.get("run") != run:
            return StreamBatch()
        return StreamBatch.from_json(plan)

    def committed_plans(self, committed_seq: int) -> dict[str, dict[str, Any]]:
        """Plans of batches Spark has committed (seq <= ``committed_seq``), by field."""
        with self._errors("reading claim plans"):
            raw = self.redis.hgetall(self.plan_key)
        return {_s(f): json.loads(v) for f, v in raw.items() if int(f) <= committed_seq}

    def drop_plans(self, fields: Iterable[str]) -> None:
        """Delete plans: the offsets in Spark's checkpoint cover those batches now."""
        fields = list(fields)
        if fields:
            with self._errors("pruning claim plans"):
                self.redis.hdel(self.plan_key, *fields)

    def claim(self, count: int, run: str, seq: int, stop_after: str | None,
              fail_on_loss: bool) -> ClaimResult:
        """One atomic XREADGROUP > of at most ``count`` entries, recorded in the plan."""
        keep_ids = self.cache_ack_ids and self._ack_ids_bytes < ACK_ID_CACHE_BYTES
        with self._errors("claiming new entries"):
            res = self._scripts["claim"](
                keys=[self.stream, self.plan_key],
                args=[self.group, self.consumer, count, run, str(seq), stop_after or "",
                      "fail" if fail_on_loss else "skip", "1" if keep_ids else "0"])
        status, first, last, n, lost_after, lost_before, lost_count = (_s(x) for x in res[:7])
        chunk = Chunk(first, last, int(n)) if status == "ok" else None
        if chunk is not None and keep_ids and res[7]:
            self._ack_ids[chunk] = res[7]
            self._ack_ids_bytes += len(res[7])
        return ClaimResult(status, chunk, lost_after, lost_before, int(lost_count))

    def reclaim(self, cursor: str, count: int, min_idle_ms: int, run: str, seq: int,
                max_deliveries: int, dead_letter_stream: str | None, protect_from: int
                ) -> ReclaimResult:
        """One atomic XAUTOCLAIM pass of at most ``count`` entries (scans <= 10x that) into the
        plan of batch ``seq``; entries of plans ``>= protect_from`` are never taken."""
        with self._errors("reclaiming idle entries"):
            res = self._scripts["reclaim"](
                keys=[self.stream, self.plan_key, dead_letter_stream or self.stream],
                args=[self.group, self.consumer, min_idle_ms, cursor, count, run, str(seq),
                      max_deliveries, protect_from])
        next_cursor, flat, dead, deleted = res
        taken = tuple((_s(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2))
        return ReclaimResult(_s(next_cursor), taken, int(dead), tuple(_s(d) for d in deleted))

    # -- acks ----------------------------------------------------------------------------------

    def ack(self, batch: StreamBatch) -> int:
        """XACK every entry of ``batch`` still pending for this consumer. Idempotent.

        Chunks whose IDs this process kept when it claimed them are acked with plain XACKs of
        those IDs, sent pre-encoded; the others with ack_range (which reads the IDs from this
        consumer's PEL).
        """
        known = [c for c in batch.chunks if c in self._ack_ids]
        acked = self._xack_known(known) if known else None
        rest = batch.chunks if acked is None else [c for c in batch.chunks if c not in known]
        acked = acked or 0
        with self._errors("acking committed entries"):
            pipe = self.redis.pipeline(transaction=False)
            for chunk in rest:
                self._scripts["ack_range"](keys=[self.stream],
                                           args=[self.group, self.consumer, chunk.first,
                                                 chunk.last], client=pipe)
            ids = [i for i, _ in batch.reclaimed]
            for k in range(0, len(ids), 1000):
                pipe.xack(self.stream, self.group, *ids[k:k + 1000])
            for n in pipe.execute():
                acked += int(n)
        return acked

    def _xack_known(self, chunks: list[Chunk]) -> int | None:
        """One pipelined round trip of ``XACK stream group <ids>`` per chunk, packed here from
        the RESP the claim script returned (no per-ID work in Python). The chunks leave the
        cache either way; None on a connection error: ``ack`` then acks them with ack_range
        (through the client's retries; acks are idempotent)."""
        head = b"*%d\r\n$4\r\nXACK\r\n" + self._xack_args
        packed = [head % (c.count + 3) + self._ack_ids[c] for c in chunks]
        pool = self.redis.connection_pool
        conn = pool.get_connection()
        for c in chunks:
            self._ack_ids_bytes -= len(self._ack_ids.pop(c))
        acked = 0
        try:
            conn.send_packed_command(packed)
            for _ in chunks:
                acked += int(conn.read_response())
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            return None
        except redis.RedisError as exc:
            conn.disconnect()
            raise translate(exc, f"acking committed entries (stream {self.stream!r}, group "
                                 f"{self.group!r}, url {self.spec.display})",
                            self.spec.secrets) from exc
        finally:
            pool.release(conn)
        return acked

    # -- progress ------------------------------------------------------------------------------

    def last_generated_id(self) -> str | None:
        with self._errors("reading stream info"):
            if _s(self.redis.type(self.stream)) == "none":
                return None
            return _s(self.redis.xinfo_stream(self.stream)["last-generated-id"])

    def stats(self) -> GroupStats:
        """Lag and pending of the group (``XINFO GROUPS``); ``None`` where Redis does not know."""
        with self._errors("reading group info"):
            for g in self.redis.xinfo_groups(self.stream):
                if _s(g["name"]) == self.group:
                    lag = g.get("lag")
                    return GroupStats(int(g["pending"]), None if lag is None else int(lag),
                                      _s(g["last-delivered-id"]))
        return GroupStats(None, None, None)
