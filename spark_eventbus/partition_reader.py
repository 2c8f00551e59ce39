"""Executor side of reads: replay one partition with ``XRANGE`` into Arrow record batches.

Never a PEL history read (it would bump delivery counts and return ``nil`` for deleted entries),
so the same partition yields the same rows on every retry, speculative task or repeated action.
Memory is bounded by :data:`READ_PAGE` entries per Arrow batch, whatever the batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .decoding import BatchBuilder, ValueParser, output_schema, parse_value_schema
from .errors import DataLossError
from .partitions import RangePartition, ReadSpec, SlicePartition
from .redisio import Redis, client, redis_errors, xack, xrange_pages
from .worker_gc import settle

log = logging.getLogger("spark_eventbus")

# Entries per XRANGE page and per Arrow batch: bounds worker memory whatever the batch size.
# Pages never cross a claimed range.
READ_PAGE = 5_000


def _builder(spec: ReadSpec) -> BatchBuilder:
    vs = parse_value_schema(spec.value_schema) if spec.value_schema else None
    return BatchBuilder(output_schema(vs, fields_binary=spec.fields_binary),
                        fields_binary=spec.fields_binary,
                        value_parser=ValueParser(spec.value_field, vs) if vs else None)


def read_slice(part: SlicePartition) -> Iterator[pa.RecordBatch]:
    """Replay one slice of a micro-batch, as Arrow batches of at most :data:`READ_PAGE` rows.

    Entries deleted or trimmed since they were claimed are missing from XRANGE: with
    ``failOnDataLoss`` the task fails naming them; otherwise they are logged and acked (except
    with ``ackMode=none``) so no PEL residue is left.
    """
    settle()
    spec, sl = part.spec, part.slice
    r = client(spec.conn, raw_entries=True)
    build = _builder(spec)
    missing: list[str] = []
    with redis_errors(f"reading stream {sl.stream!r}", spec.conn):
        got: dict[str, int] = {}
        for rng in sl.chunks:
            for page in xrange_pages(r, sl.stream, rng.first, rng.last, READ_PAGE):
                got[rng.first] = got.get(rng.first, 0) + len(page)
                yield build.build(sl.stream, page, 1)
        for rng in sl.chunks:
            if got.get(rng.first, 0) != rng.count:
                missing += _missing_in_range(r, spec, sl.stream, rng.first, rng.last)
        for k in range(0, len(sl.reclaimed), READ_PAGE):
            part_ids = sl.reclaimed[k:k + READ_PAGE]
            pipe = r.pipeline(transaction=False)
            for entry_id, _ in part_ids:
                pipe.execute_command("XRANGE", sl.stream, entry_id, entry_id)
            rows, counts = [], []
            for (entry_id, deliveries), res in zip(part_ids, pipe.execute(), strict=True):
                if res:
                    rows.append(res[0])
                    counts.append(deliveries)
                else:
                    missing.append(entry_id)
            if rows:
                yield build.build(sl.stream, rows, counts)
        if missing:
            _handle_missing(r, spec, sl.stream, missing)


def _missing_in_range(r: Redis, spec: ReadSpec, stream: str, first: str, last: str
                      ) -> list[str]:
    """IDs this consumer has pending in [first, last] that the stream no longer holds."""
    assert spec.group is not None and spec.consumer is not None
    pel: Any = r.xpending_range(stream, spec.group, first, last, 100_000,
                                consumername=spec.consumer)
    pending = [e["message_id"].decode() if isinstance(e["message_id"], bytes)
               else str(e["message_id"]) for e in pel]
    present: set[str] = set()
    for page in xrange_pages(r, stream, first, last, READ_PAGE):
        present.update(e[0].decode() for e in page)
    gone = [i for i in pending if i not in present]
    return gone or [f"{first}..{last}"]


def _handle_missing(r: Redis, spec: ReadSpec, stream: str, missing: list[str]) -> None:
    shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10
                                       else "")
    if spec.fail_on_data_loss:
        raise DataLossError(
            f"{len(missing)} entries of stream {stream!r} were deleted or trimmed after this "
            f"query claimed them and before it read them: {shown}. Keep the stream longer "
            "(MAXLEN/MINID) than the query's lag, or set option 'failOnDataLoss' to 'false' "
            "to skip them with a warning.")
    log.warning("spark-eventbus: skipping %d entries of stream %r deleted before they were "
                "read (failOnDataLoss=false): %s", len(missing), stream, shown)
    ids = [i for i in missing if ".." not in i]
    if spec.ack_mode != "none" and spec.group:
        xack(r, stream, spec.group, ids)


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """A batch read of ``XRANGE start end``, paged."""
    settle()
    r = client(part.spec.conn, raw_entries=True)
    build = _builder(part.spec)
    with redis_errors(f"reading stream {part.stream!r}", part.spec.conn):
        for page in xrange_pages(r, part.stream, part.start, part.end, READ_PAGE):
            yield build.build(part.stream, page, None)
