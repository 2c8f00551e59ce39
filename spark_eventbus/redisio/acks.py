"""Acks of committed batches, many streams at once (a single stream is a list of one).

Chunks whose IDs this process kept when it claimed them (:meth:`.group.ConsumerOps.claimed`)
are acked with plain ``XACK``s of those IDs, sent pre-encoded, one round trip per node; the
other chunks with ``ack_range.lua`` (which reads the IDs from this consumer's PEL) and the
reclaimed IDs with ``XACK``s, pipelined per node. Idempotent: an ID no longer pending is not
counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import EventBusConnectionError
from ..offsets import ClaimedRange, StreamBatch
from . import retention
from .boundary import redis_errors
from .group import ConsumerOps, where
from .retry import CLUSTER_REDIRECTS, NOT_RUN
from .scripts import run_scripts
from .streams import xack_commands
from .wire import node_for, pipeline, raise_first, roundtrip


def ack(pairs: Sequence[tuple[ConsumerOps, StreamBatch]]) -> int:
    """XACK every entry of each ``(op, batch)`` still pending for its consumer; the number
    acked."""
    pairs = [(op, b) for op, b in pairs if b]
    if not pairs:
        return 0
    ops = [op for op, _ in pairs]
    spec = ops[0].spec
    what = f"acking committed entries ({where(ops)})"
    acked, rest = _ack_known(pairs, what)
    with redis_errors(what, spec):
        if rest:
            acked += sum(int(n) for n in run_scripts(ops[0].redis, "ack_range", [
                op.ack_range(c) for op, c in rest]))
        xacks = [c for op, batch in pairs for c in xack_commands(
            op.stream, op.group, [i for i, _ in batch.reclaimed])]
        acked += sum(int(n) for n in raise_first(pipeline(ops[0].redis, xacks)))
    return acked


def _ack_known(pairs: Sequence[tuple[ConsumerOps, StreamBatch]], what: str
               ) -> tuple[int, list[tuple[ConsumerOps, ClaimedRange]]]:
    """The chunks whose IDs this process kept, as packed ``XACK``s in one round trip per
    node (through the client's retries). Returns what they acked and the chunks left to
    ``ack_range``: those whose IDs were not kept, and those of a node that stayed
    unreachable or whose slot moved (a cluster: ``ack_range`` follows it; acks are
    idempotent)."""
    r = pairs[0][0].redis
    acked = 0
    rest: list[tuple[ConsumerOps, ClaimedRange]] = []
    by_node: dict[int, tuple[Any, list[tuple[ConsumerOps, ClaimedRange, bytes]]]] = {}
    for op, batch in pairs:
        known, packed = op.packed_acks(batch)
        rest += [(op, c) for c in batch.chunks if c not in known]
        node = node_for(r, op.stream) if known else None
        if known and node is None:  # no node serves the slot now: ack_range follows it
            rest += [(op, c) for c in known]
            continue
        for c, p in zip(known, packed, strict=True):
            by_node.setdefault(id(node), (node, []))[1].append((op, c, p))
    for node, sends in by_node.values():
        try:
            with redis_errors(what, pairs[0][0].spec):
                replies = roundtrip(node, [p for _, _, p in sends], len(sends),
                                    resend_on=NOT_RUN)
                for (op, c, _), reply in zip(sends, replies, strict=True):
                    if isinstance(reply, CLUSTER_REDIRECTS):  # the slot moved meanwhile
                        rest.append((op, c))
                    elif isinstance(reply, Exception):
                        raise reply
                    else:
                        acked += int(reply)
        except EventBusConnectionError:
            rest += [(op, c) for op, c, _ in sends]
    return acked, rest


def trim_acked(ops: Sequence[ConsumerOps]) -> int:
    """``trimAcked``: remove from each stream the entries every group of it has acked, in
    whole stream nodes (``XTRIM MINID ~``, bounded work; :func:`.retention.trim_acked`: one
    atomic script per stream, which checks every group again). The number removed."""
    removed = 0
    for op in ops:
        with redis_errors(f"trimming acked entries ({where([op])})", op.spec):
            removed += retention.trim_acked(op.redis, op.stream, exact=False).entries
    return removed
