"""Claim plans and loss records, many streams at once (a single stream is a list of one),
pipelined per node: the plan of the batch being planned (:func:`plans`), the committed
batches' plans (:func:`committed_plans`, :func:`drop_plans`), their loss records
(:func:`settle_all_losses`), where a driver before this one left any (:func:`left_behind`),
and the bookkeeping of streams that left a pattern
(:func:`forget`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.offsets import StreamBatch
from .boundary import redis_errors
from .group import ConsumerOps, where
from .losses import settle_losses
from .scripts import run_scripts
from .streams import text
from .wire import as_map, pipeline, raise_first


def plans(ops: Sequence[ConsumerOps], run: str, seq: int) -> list[StreamBatch]:
    """What was already claimed for batch (run, seq) on each stream: pre-claimed, or left by
    a crash (``plan_load.lua`` closes a claim cut short between ``claim.lua`` and
    ``claim_record.lua`` first). One script call per stream, pipelined (batched per node):
    the callers ask only where a plan may be (:meth:`.group.closing.Closer.plan_scope`), and
    a stream without one answers ''."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({where(ops)})", ops[0].spec):
        raw = run_scripts(ops[0].redis, "plan_load", [op.plan_load(run, seq) for op in ops])
    return [_plan(r, run) for r in raw]


def _plan(raw: Any, run: str) -> StreamBatch:
    if not raw:
        return StreamBatch()
    plan = json.loads(raw)
    if plan.get("run") != run:
        return StreamBatch()
    return StreamBatch.from_json(plan)


def left_behind(ops: Sequence[ConsumerOps]) -> set[str]:
    """The streams of ``ops`` where this consumer has claim plans or loss records (written by
    a driver before this one, or by its tasks): a pipelined ``PTTL`` of each stream's plan key
    and loss key (-2: no such key), in one round trip per node. Its first batches look for
    plans and losses on these streams only (:meth:`.group.closing.Closer.plan_scope`)."""
    if not ops:
        return set()
    with redis_errors(f"looking for claim plans ({where(ops)})", ops[0].spec):
        ttls = raise_first(pipeline(ops[0].redis, [
            ("PTTL", key) for op in ops
            for key in (op.plan_key, op.loss_key)]))
    return {op.stream for op, plan, loss in zip(ops, ttls[0::2], ttls[1::2], strict=True)
            if plan != -2 or loss != -2}


def committed_plans(ops: Sequence[ConsumerOps], committed_seq: int
                    ) -> list[tuple[list[str], list[dict[str, Any]]]]:
    """Each stream's plans of batches Spark has committed (seq <= ``committed_seq``),
    pipelined: their fields, and the plans of batches before ``committed_seq`` parsed (a
    driver that died before acking them; the committed batch's own plan is not parsed: its
    offset says the same)."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({where(ops)})", ops[0].spec):
        raw = raise_first(pipeline(ops[0].redis, [("HGETALL", op.plan_key) for op in ops]))
    out = []
    for r in raw:
        fields: list[str] = []
        earlier: list[dict[str, Any]] = []
        for f, v in as_map(r).items():
            seq = int(f)
            if seq <= committed_seq:
                fields.append(text(f))
                if seq < committed_seq:
                    earlier.append(json.loads(v))
        out.append((fields, earlier))
    return out


def settle_all_losses(ops: Sequence[ConsumerOps], run: str, seq: int) -> tuple[int, int]:
    """Batch ``seq`` of ``run`` is committed: drop every stream's loss records (and older
    ones), for ``lostEntries``; streams without loss records (nearly
    all) cost one pipelined ``PTTL`` each (-2: no such key; ``PTTL``, not ``EXISTS``, is in
    the streaming reader's ACL rule already). Returns the summed (entries, ranges)."""
    if not ops:
        return 0, 0
    with redis_errors(f"settling loss records ({where(ops)})", ops[0].spec):
        found = raise_first(pipeline(ops[0].redis, [
            ("PTTL", op.loss_key) for op in ops]))
        entries = ranges = 0
        for op, there in zip(ops, found, strict=True):
            if there != -2:
                e, r = settle_losses(op.redis, op.stream, op.group, op.consumer, run, seq)
                entries, ranges = entries + e, ranges + r
    return entries, ranges


def drop_plans(ops: Sequence[ConsumerOps], fields: Sequence[Sequence[str]]) -> None:
    """Delete plans, pipelined: the offsets in Spark's checkpoint cover those batches now."""
    todo = [(op, list(f)) for op, f in zip(ops, fields, strict=True) if f]
    if not todo:
        return
    with redis_errors(f"pruning claim plans ({where(ops)})", ops[0].spec):
        raise_first(pipeline(todo[0][0].redis, [("HDEL", op.plan_key, *f) for op, f in todo]))


def forget(ops: Sequence[ConsumerOps]) -> None:
    """Streams that left a pattern subscription (deleted): drop this consumer's claim plans,
    loss records and lease of each."""
    if not ops:
        return
    with redis_errors(f"dropping the bookkeeping of {where(ops)}", ops[0].spec):
        raise_first(pipeline(ops[0].redis, [
            ("DEL", key) for op in ops
            for key in (op.plan_key, op.loss_key, op.lease_key)]))
