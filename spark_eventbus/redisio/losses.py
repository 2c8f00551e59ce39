"""Entries a replayed batch no longer finds (:mod:`spark_eventbus.core.losses`), on the Redis side:
per-ID replay of reclaimed entries, acking what is gone, and the consumer's loss record
(``lua/loss_record.lua``, ``loss_accept.lua``, ``loss_settle.lua``).

The record is written by the executors that find a loss (they run in other processes than the
driver, and the task that fails is the only one that knows the figures), read by
``eventbus status``, accepted by ``eventbus group accept-loss``, and counted then deleted by the
driver once the batch commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.keys import loss_key
from ..core.losses import LossRecord, RangeLoss
from .client import Redis
from .scripts import run_script
from .streams import text, xack, xrange_pages
from .wire import pipeline, raise_first

# XPENDING entries per call when acking what a range lost.
_PEL_PAGE = 1000


def xrange_each(r: Redis, stream: str, ids: Sequence[str]) -> list[Any]:
    """``XRANGE stream id id`` for each of ``ids``, pipelined: the entry, or None where the
    stream no longer holds it (entries as the server sent them)."""
    found = raise_first(pipeline(r, [("XRANGE", stream, entry_id, entry_id) for entry_id in ids]))
    return [res[0] if res else None for res in found]


def ack_gone(r: Redis, stream: str, group: str, lost: Sequence[RangeLoss]) -> int:
    """XACK what ``lost`` names that the group still has pending: the reclaimed IDs, and in
    each claimed range the pending IDs the stream no longer holds, whichever consumer holds
    them (an entry that is gone cannot be delivered by any; left pending, a later XAUTOCLAIM
    would report it lost a second time). Entries still in the stream are left alone. Bounded by
    the ranges (each at most one claim chunk). Idempotent."""
    ids = [r_.first for r_ in lost if r_.reclaimed]
    for rng in (r_ for r_ in lost if not r_.reclaimed):
        pending: list[str] = []
        start = rng.first
        while True:
            page: Any = r.xpending_range(stream, group, start, rng.last, _PEL_PAGE)
            pending += [text(e["message_id"]) for e in page]
            if len(page) < _PEL_PAGE:
                break
            start = "(" + pending[-1]
        if not pending:
            continue  # nothing of it pending (e.g. a replica promoted before the claim)
        present: set[str] = set()
        for entries in xrange_pages(r, stream, rng.first, rng.last, 5_000):
            present.update(text(e[0]) for e in entries)
        ids += [i for i in pending if i not in present]
    return xack(r, stream, group, ids)


def record_losses(r: Redis, stream: str, group: str, consumer: str, run: str, seq: int,
                  now_ms: int, fail: bool, lost: Sequence[RangeLoss]) -> bool:
    """Add ``lost`` to the consumer's record of batch ``seq`` (``lua/loss_record.lua``).
    True: move past them (``fail`` is False, or an operator accepted them all); False: the
    replay must stop (the record then shows it to ``eventbus status``)."""
    args: list[Any] = [run, str(seq), now_ms, "fail" if fail else "skip"]
    for rng in lost:
        args += [rng.name, rng.count, rng.missing]
    res = run_script(r, "loss_record", [loss_key(stream, group, consumer)], args)
    return text(res) == "skip"


def loss_records(r: Redis, stream: str, group: str, consumer: str) -> list[LossRecord]:
    """The consumer's loss records, by batch (``HGETALL``)."""
    raw: Any = r.hgetall(loss_key(stream, group, consumer))
    recs = [LossRecord.from_json(consumer, json.loads(v)) for v in raw.values()]
    return sorted(recs, key=lambda rec: rec.seq)


def accept_losses(r: Redis, stream: str, group: str, consumer: str, seq: int | None = None
                  ) -> list[LossRecord]:
    """Accept the losses the consumer's query stopped on (batch ``seq``, or every batch):
    its next replay of that batch moves past exactly the entries recorded missing
    (``lua/loss_accept.lua``). Returns the records accepted (none: nothing was waiting)."""
    res = run_script(r, "loss_accept", [loss_key(stream, group, consumer)],
                     ["" if seq is None else str(seq)])
    return [LossRecord.from_json(consumer, json.loads(text(v))) for v in res]


def settle_losses(r: Redis, stream: str, group: str, consumer: str, run: str, seq: int
                  ) -> tuple[int, int]:
    """Batch ``seq`` of ``run`` is committed: drop the records of batches up to it (and of
    other runs); returns (entries, ranges) their replays moved past (``lua/loss_settle.lua``)."""
    entries, ranges = run_script(r, "loss_settle", [loss_key(stream, group, consumer)],
                                 [run, str(seq)])
    return int(entries), int(ranges)
