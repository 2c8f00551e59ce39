"""Trigger controls on a real Redis: maxBytesPerTrigger, minEntriesPerTrigger/maxTriggerDelay.

The reader's driver half plans batches here (``latestOffset``), the executor half reads them
(``read``), in this process: assertions are on each batch's contents, never on wall time."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_eventbus.core.offsets import BatchOffset
from tests.integration.helpers import (
    driver_reader,
    ids_of,
    input_rows,
    produce,
    run_available_now,
    stream_df,
    wait_for,
)

MIB = 2**20


def _size(fields: dict[bytes, bytes]) -> int:
    return sum(len(k) + len(v) for k, v in fields.items())


def _batches(reader: Any, limit: Any, max_batches: int = 100) -> list[list[str]]:
    """Plan, read and commit batches until the reader has nothing more; each batch's IDs."""
    out: list[list[str]] = []
    start = reader.initialOffset()
    for _ in range(max_batches):
        end = reader.latestOffset(start, limit)
        if end == start:
            return out
        if BatchOffset.from_json(end).streams:
            out.append([i for p in reader.partitions(start, end) for b in reader.read(p)
                        for i in b.column("id").to_pylist()])
        reader.commit(end)
        start = end
    raise AssertionError("the reader never ran dry")


def test_byte_bound_holds_with_mixed_100b_and_1mib_entries_and_never_wedges(redis_server, names):
    r = redis_server.client()
    stream = names["stream"]
    pattern = [100] * 5 + [MIB] + [100] * 3 + [MIB, MIB] + [100] * 4
    ids = [r.xadd(stream, {"payload": b"x" * n}).decode() for n in pattern]
    sizes = {i: _size(f) for i, f in r.xrange(stream)}
    sizes = {k.decode(): v for k, v in sizes.items()}
    bound = 600
    reader = driver_reader(redis_server.url, stream, names["group"],
                           maxBytesPerTrigger=str(bound), maxEntriesPerTrigger="4")
    try:
        batches = _batches(reader, ReadMaxRows(4))
    finally:
        reader.stop()
    assert sorted(i for b in batches for i in b) == sorted(ids)  # each exactly once
    for batch in batches:
        total = sum(sizes[i] for i in batch)
        assert len(batch) <= 4  # maxEntriesPerTrigger: the tighter bound wins
        assert total <= bound or len(batch) == 1, (batch, total)  # a 1 MiB entry goes alone
    big = [i for i in ids if sizes[i] > MIB]
    assert [b for b in batches if set(b) & set(big)] == [[i] for i in big]
    # the 100 B runs are cut by the entry bound (4) before the byte bound (600 B > 4 x 108 B)
    assert [len(b) for b in batches] == [4, 1, 1, 3, 1, 1, 4]


def test_reclaimed_entries_count_against_the_byte_bound(redis_server, names):
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    old = produce(r, stream, 6, payload=lambda i: "y" * 1000)
    r.xgroup_create(stream, group, "0")
    r.xreadgroup(group, "dead-worker", {stream: ">"}, count=6)  # claimed, never acked
    new = produce(r, stream, 6, start=6, payload=lambda i: "y" * 1000)
    reader = driver_reader(redis_server.url, stream, group, maxBytesPerTrigger="2500",
                           claimMinIdleMs="0", reclaimMaxEntries="100")
    try:
        batches = _batches(reader, ReadMaxRows(100_000))
    finally:
        reader.stop()
    assert sorted(i for b in batches for i in b) == sorted(old + new)
    # the reclaim filled the first batch past its bytes: no new entries claimed on top
    assert set(batches[0]) <= set(old)
    assert all(len(b) <= 2 for b in batches[1:] if set(b) <= set(new))


def test_min_entries_waits_and_the_delay_releases_it(redis_server, names):
    r = redis_server.client()
    stream = names["stream"]
    first = produce(r, stream, 5)
    reader = driver_reader(redis_server.url, stream, names["group"], minEntriesPerTrigger="10",
                           maxTriggerDelay="1h")
    try:
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadMaxRows(100)) is start  # 5 < 10: waits
        more = produce(r, stream, 5, start=5)
        end = reader.latestOffset(start, ReadMaxRows(100))
        batch = [i for p in reader.partitions(start, end) for b in reader.read(p)
                 for i in b.column("id").to_pylist()]
        assert sorted(batch) == sorted(first + more)
        reader.commit(end)
    finally:
        reader.stop()

    # a short delay: three entries wait, then go when the delay since the last batch passed
    other = stream + ":b"
    few = produce(r, other, 3)
    reader = driver_reader(redis_server.url, other, names["group"], minEntriesPerTrigger="100",
                           maxTriggerDelay="300ms")
    try:
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadMaxRows(1000)) is start
        got: list[Any] = []

        def released() -> bool:
            got.append(reader.latestOffset(start, ReadMaxRows(1000)))
            return got[-1] is not start
        wait_for(released, timeout=60, what="maxTriggerDelay to release the batch")
        end = got[-1]
        batch = [i for p in reader.partitions(start, end) for b in reader.read(p)
                 for i in b.column("id").to_pylist()]
        assert sorted(batch) == sorted(few)
    finally:
        reader.stop()


def test_available_now_never_waits_for_min_entries(redis_server, names):
    r = redis_server.client()
    ids = produce(r, names["stream"], 3)
    reader = driver_reader(redis_server.url, names["stream"], names["group"],
                           minEntriesPerTrigger="1000", maxTriggerDelay="1h")
    try:
        reader.prepareForTriggerAvailableNow()
        batches = _batches(reader, ReadAllAvailable())
    finally:
        reader.stop()
    assert sorted(i for b in batches for i in b) == sorted(ids)


def test_progress_carries_entries_behind_per_stream_and_in_total(redis_server, names):
    """``entriesBehind`` (the group's lag, ``XINFO GROUPS``; ``lag`` is its alias) per stream
    and summed under ``_eventbus``; null where the server cannot count it (an ``XDEL`` after the
    group's position: Redis 7.0 and Valkey 9.1 alike), and then the total is null too."""
    r = redis_server.client()
    a, b, c = (f"{names['stream']}:{x}" for x in "abc")
    produce(r, a, 5)
    produce(r, b, 7)
    r.xdel(c, produce(r, c, 3)[1])
    reader = driver_reader(redis_server.url, f"{a},{b}", names["group"])
    try:
        start = reader.initialOffset()
        report = reader.reportLatestOffset()
        assert [report[s]["entriesBehind"] for s in (a, b)] == [report[a]["lag"],
                                                                 report[b]["lag"]] == [5, 7]
        assert report["_eventbus"]["entriesBehind"] == 12
        reader.latestOffset(start, ReadMaxRows(4))
        report = reader.reportLatestOffset()  # (the pre-claim of the next batch may run too)
        behind = [report[s]["entriesBehind"] for s in (a, b)]
        assert behind == [report[a]["lag"], report[b]["lag"]]
        assert report["_eventbus"]["entriesBehind"] == sum(behind) <= 12 - 4
    finally:
        reader.stop()
    reader = driver_reader(redis_server.url, f"{a},{c}", f"{names['group']}-2")
    try:
        reader.initialOffset()
        report = reader.reportLatestOffset()
        assert report[a]["entriesBehind"] == 5
        assert report[c]["entriesBehind"] is None and report[c]["lag"] is None
        assert report["_eventbus"]["entriesBehind"] is None
    finally:
        reader.stop()


def test_a_query_under_available_now_keeps_the_byte_bound(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 7, payload=lambda i: "z" * 1000)  # ~1,020 B each
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxBytesPerTrigger=2500)
    rows, q = run_available_now(df, tmp_path)
    assert sorted(ids_of(rows)) == sorted(ids)
    assert [n for n in input_rows(q) if n] == [2, 2, 2, 1]
