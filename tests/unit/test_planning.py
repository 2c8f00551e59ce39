from __future__ import annotations

import itertools

from spark_eventbus.offsets import BatchOffset, Chunk, StreamBatch
from spark_eventbus.planning import (
    MAX_CLAIM_CHUNK,
    claim_chunk_size,
    share_budget,
    split_id_range,
    split_partitions,
)


def test_claim_chunks_are_bounded_and_split_a_batch_over_partitions():
    assert claim_chunk_size(None, 2, 1) == MAX_CLAIM_CHUNK
    assert claim_chunk_size(100_000, 2, 1) == MAX_CLAIM_CHUNK
    assert claim_chunk_size(1_000, 2, 1) == 500
    assert MAX_CLAIM_CHUNK <= 10_000
    assert claim_chunk_size(1_000, 4, 2) == 125
    assert claim_chunk_size(1, 8, 3) == 1


def test_share_budget_is_fair_and_reassigns_what_a_consumer_cannot_take():
    assert share_budget(10, [100, 100]) == [5, 5]
    assert share_budget(10, [2, 100]) == [2, 8]
    assert share_budget(10, [0, 0]) == [0, 0]
    assert sum(share_budget(7, [5, 5, 5])) == 7
    assert share_budget(0, [3]) == [0]


def test_split_partitions_balances_by_count_and_keeps_every_entry():
    chunks = tuple(Chunk(f"{i}-0", f"{i}-9", n) for i, n in enumerate([500, 500, 300, 200, 100]))
    reclaimed = tuple((f"0-{i}", 2) for i in range(10))
    batch = StreamBatch(chunks, reclaimed)
    slices = split_partitions("s", batch, 2)
    assert len(slices) == 2
    assert sorted((c for s in slices for c in s.chunks), key=lambda c: c.first) == sorted(
        chunks, key=lambda c: c.first)
    assert sorted(r for s in slices for r in s.reclaimed) == sorted(reclaimed)
    assert abs(slices[0].count - slices[1].count) <= 100
    assert split_partitions("s", batch, 2) == slices  # deterministic


def test_split_partitions_orders_chunks_by_id_not_text():
    chunks = (Chunk("10-0", "10-5", 5), Chunk("9-0", "9-5", 5))
    (only,) = split_partitions("s", StreamBatch(chunks), 1)
    assert [c.first for c in only.chunks] == ["9-0", "10-0"]


def test_empty_batch_has_no_partitions_and_fewer_chunks_than_partitions_is_fine():
    assert split_partitions("s", StreamBatch(), 4) == []
    assert len(split_partitions("s", StreamBatch((Chunk("1-0", "1-1", 2),)), 4)) == 1


def test_split_id_range_covers_the_range_without_overlap():
    parts = split_id_range(100, 199, 3)
    assert parts[0][0] == 100 and parts[-1][1] == 199
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(parts))
    assert split_id_range(5, 5, 4) == [(5, 5)]


def test_offsets_round_trip_with_a_fixed_key_order():
    off = BatchOffset("run1", 3, {"b": StreamBatch((Chunk("1-0", "2-0", 2),), (("0-5", 3),)),
                                  "a": StreamBatch((Chunk("3-0", "3-0", 1),))})
    js = off.to_json()
    assert list(js) == ["v", "run", "seq", "streams"]
    assert list(js["streams"]) == ["a", "b"]
    assert BatchOffset.from_json(js) == BatchOffset.from_json(js)
    assert BatchOffset.from_json(js).to_json() == js
    assert BatchOffset.from_json(js).count == 4


def test_offsets_accept_lua_empty_arrays_encoded_as_objects():
    assert StreamBatch.from_json({"chunks": [["1-0", "1-1", 2]], "reclaimed": {}}).count == 2
