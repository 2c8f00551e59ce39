"""Acks of committed batches, many streams at once (a single stream is a list of one).

One path: ``XACK``s of IDs, pipelined (:func:`.wire.pipeline`: one round trip per node,
following a cluster's redirections). The IDs are those this process kept when it claimed the
chunk (:meth:`.group.ConsumerOps.claimed`, sent pre-encoded), else those the consumer's PEL
holds in the chunk's range (``XPENDING``, one round trip before: a chunk of a plan an earlier
driver left, or past the ID cache), and the reclaimed IDs the offset names. Idempotent: an ID
no longer pending is not counted, so a retry or a second ack of the same batch is harmless.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..core.offsets import StreamBatch
from . import retention
from .boundary import redis_errors
from .group import ConsumerOps, where
from .streams import permitted, text
from .wire import Packed, pipeline, raise_first


def ack(pairs: Sequence[tuple[ConsumerOps, StreamBatch]]) -> Counter[str]:
    """XACK every entry of each ``(op, batch)`` still pending for its consumer; the number
    acked per stream (the servers' counts: an ID no longer pending is not counted)."""
    pairs = [(op, b) for op, b in pairs if b]
    acked: Counter[str] = Counter()
    if not pairs:
        return acked
    r, spec = pairs[0][0].redis, pairs[0][0].spec
    with redis_errors(f"acking committed entries ({where([op for op, _ in pairs])})", spec):
        xacks: list[Sequence[Any] | Packed] = []
        owners: list[str] = []  # the stream of each command of xacks
        unknown = []

        def add(op: ConsumerOps, commands: Sequence[Sequence[Any] | Packed]) -> None:
            xacks.extend(commands)
            owners.extend([op.stream] * len(commands))

        for op, batch in pairs:
            known, packed = op.packed_acks(batch)
            add(op, packed)
            unknown += [(op, c) for c in batch.chunks if c not in known]
            add(op, op.ack_commands([i for i, _ in batch.reclaimed]))
        pels = raise_first(pipeline(r, [op.pending_in(c) for op, c in unknown]))
        for (op, _), pel in zip(unknown, pels, strict=True):
            add(op, op.ack_commands([text(p[0]) for p in pel]))
        for stream, reply in zip(owners, raise_first(pipeline(r, xacks)), strict=True):
            acked[stream] += _acked(reply)
        return acked


def may_delete_acked(op: ConsumerOps) -> bool:
    """Whether this ACL user may run ``XACKDEL`` (on a server that has it: a server checks a
    command's arity before the user's rule, so the capability probe cannot tell): an ack of
    ``0-0``, which no group holds, acks and deletes nothing."""
    with redis_errors(f"checking that the user may run XACKDEL ({where([op])})", op.spec):
        return permitted(op.redis, "XACKDEL", op.stream, op.group, "ACKED", "IDS", 1, "0-0")


def _acked(reply: Any) -> int:
    """How many IDs an ack acked: ``XACK``'s count, or ``XACKDEL``'s codes per ID (1: acked and
    deleted, 2: acked and kept for another group, -1: not pending in this group)."""
    if isinstance(reply, list):
        return sum(1 for code in reply if int(code) > 0)
    return int(reply)


def trim_acked(ops: Sequence[ConsumerOps]) -> list[str]:
    """``trimAcked``: remove from each stream the entries every group of it has acked, in
    whole stream nodes (``XTRIM MINID ~``, bounded work; :func:`.retention.trim_acked`: one
    atomic script per stream, which checks every group again). The streams it removed
    entries from."""
    trimmed = []
    for op in ops:
        with redis_errors(f"trimming acked entries ({where([op])})", op.spec):
            if retention.trim_acked(op.redis, op.stream, exact=False).entries:
                trimmed.append(op.stream)
    return trimmed
