from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_eventbus.core.offsets import BatchOffset, ClaimedRange, StreamBatch
from spark_eventbus.core.planning import (
    MAX_CLAIM_CHUNK,
    MIN_SHARE,
    SYNC_CLAIM_ENTRIES,
    UNBOUNDED_GRANT,
    Slice,
    claim_chunk_size,
    entries_within,
    first_claim_allowance,
    next_turn,
    pack_partitions,
    preclaim_allowance,
    share_budget,
    should_wait,
    split_id_range,
    stream_grants,
    takes_turns,
)
from spark_eventbus.errors import EventBusError


def split_partitions(stream: str, batch: StreamBatch, num_partitions: int) -> list[Slice]:
    """One stream's batch packed over at most ``num_partitions`` slices."""
    return [slices[0] for slices in pack_partitions({stream: batch}, num_partitions)
            if slices] if batch else []


def test_claim_chunks_are_bounded_and_split_a_batch_over_partitions():
    assert claim_chunk_size(None, 2, 1) == MAX_CLAIM_CHUNK
    assert claim_chunk_size(100_000, 2, 1) == MAX_CLAIM_CHUNK
    assert claim_chunk_size(1_000, 2, 1) == 500
    assert MAX_CLAIM_CHUNK <= 10_000
    assert claim_chunk_size(1_000, 4, 2) == 250  # 2 chunks per stream fill 4 partitions
    assert claim_chunk_size(100_000, 2, 1_000) == 100  # one chunk per stream's share
    assert claim_chunk_size(1, 8, 3) == 1


def test_share_budget_is_fair_and_reassigns_what_a_consumer_cannot_take():
    assert share_budget(10, [100, 100]) == [5, 5]
    assert share_budget(10, [2, 100]) == [2, 8]
    assert share_budget(10, [0, 0]) == [0, 0]
    assert sum(share_budget(7, [5, 5, 5])) == 7
    assert share_budget(0, [3]) == [0]


def _share_budget_as_it_was(budget: int, wants: list[int]) -> list[int]:
    """share_budget before it was made linear (active.remove per consumer), the reference."""
    grants = [0] * len(wants)
    remaining = budget
    active = [i for i, w in enumerate(wants) if w > 0]
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for i in list(active):
            give = min(share, wants[i] - grants[i], remaining)
            grants[i] += give
            remaining -= give
            if grants[i] >= wants[i]:
                active.remove(i)
            if remaining == 0:
                break
    return grants


@given(st.integers(0, 2_000), st.lists(st.integers(0, 300), max_size=60))
def test_share_budget_grants_what_it_always_granted_within_the_wants_and_budget(
        budget: int, wants: list[int]) -> None:
    grants = share_budget(budget, wants)
    assert grants == _share_budget_as_it_was(budget, wants)
    assert all(0 <= g <= w for g, w in zip(grants, wants, strict=True))
    assert sum(grants) == min(budget, sum(wants))


def test_split_partitions_balances_by_count_and_keeps_every_entry():
    sizes = [500, 500, 300, 200, 100]
    chunks = tuple(ClaimedRange(f"{i}-0", f"{i}-9", n) for i, n in enumerate(sizes))
    reclaimed = tuple((f"0-{i}", 2) for i in range(10))
    batch = StreamBatch(chunks, reclaimed)
    slices = split_partitions("s", batch, 2)
    assert len(slices) == 2
    assert sorted((c for s in slices for c in s.chunks), key=lambda c: c.first) == sorted(
        chunks, key=lambda c: c.first)
    assert sorted(r for s in slices for r in s.reclaimed) == sorted(reclaimed)
    assert abs(slices[0].count - slices[1].count) <= 100
    assert split_partitions("s", batch, 2) == slices  # deterministic


def test_many_small_streams_pack_into_num_partitions_tasks_and_a_big_stream_still_splits():
    small = {f"s{i:04d}": StreamBatch((ClaimedRange(f"{i}-0", f"{i}-4", 5),), ((f"{i}-9", 3),))
             for i in range(1_000)}
    bins = pack_partitions(small, 4)
    assert len(bins) == 4
    assert [sum(sl.count for sl in b) for b in bins] == [1_500] * 4
    got = sorted((sl.stream, c) for b in bins for sl in b for c in sl.chunks)
    assert got == sorted((n, c) for n, b in small.items() for c in b.chunks)
    assert sorted((sl.stream, r) for b in bins for sl in b for r in sl.reclaimed) == sorted(
        (n, r) for n, b in small.items() for r in b.reclaimed)
    for b in bins:  # one slice per stream per bin, streams in name order
        assert [sl.stream for sl in b] == sorted({sl.stream for sl in b})
    assert pack_partitions(small, 4) == bins  # deterministic
    big = {"big": StreamBatch(tuple(ClaimedRange(f"{i}-0", f"{i}-9", 100) for i in range(4))),
           "quiet": StreamBatch((ClaimedRange("1-0", "1-0", 1),))}
    bins = pack_partitions(big, 4)
    assert [[(sl.stream, sl.count) for sl in b] for b in bins] == [
        [("big", 100), ("quiet", 1)], [("big", 100)], [("big", 100)], [("big", 100)]]


def _pack_as_before(streams, num_partitions):  # type: ignore[no-untyped-def]
    """pack_partitions as first written (one sort by count, name and parsed first ID): a
    replay's tasks must read the same slices whichever connector version packs the batch."""
    import heapq

    from spark_eventbus.core.ids import StreamId

    n = max(1, num_partitions)
    chunks = [[] for _ in range(n)]
    reclaimed = [[] for _ in range(n)]
    heap = [(0, i) for i in range(n)]
    units = sorted(((name, c) for name, b in streams.items() for c in b.chunks),
                   key=lambda u: (-u[1].count, u[0], StreamId.parse(u[1].first)))
    for name, chunk in units:
        load, i = heapq.heappop(heap)
        chunks[i].append((name, chunk))
        heapq.heappush(heap, (load + chunk.count, i))
    for name in sorted(streams):
        for entry in streams[name].reclaimed:
            load, i = heapq.heappop(heap)
            reclaimed[i].append((name, entry))
            heapq.heappush(heap, (load + 1, i))
    out = []
    for bin_chunks, bin_rec in zip(chunks, reclaimed, strict=True):
        by_stream = {}
        for name, chunk in bin_chunks:
            by_stream.setdefault(name, ([], []))[0].append(chunk)
        for name, entry in bin_rec:
            by_stream.setdefault(name, ([], []))[1].append(entry)
        if by_stream:
            out.append(tuple(
                Slice(name, tuple(sorted(cs, key=lambda c: StreamId.parse(c.first))), tuple(rs))
                for name, (cs, rs) in sorted(by_stream.items())))
    return out


_chunk = st.builds(lambda ms, seq, n: ClaimedRange(f"{ms}-{seq}", f"{ms + 5}-0", n),
                   st.integers(0, 30), st.integers(0, 3), st.integers(1, 4))


@given(st.dictionaries(st.sampled_from([f"s{i}" for i in range(12)] + ["s10", "S", "s:1"]),
                       st.builds(StreamBatch, st.lists(_chunk, max_size=5).map(tuple),
                                 st.lists(st.tuples(st.sampled_from(["1-0", "2-0", "10-0"]),
                                                    st.integers(1, 3)),
                                          max_size=2).map(tuple)),
                       max_size=10),
       st.integers(1, 5))
def test_property_packing_is_the_same_as_before_its_sort_was_made_cheaper(streams, parts):
    assert pack_partitions(streams, parts) == _pack_as_before(streams, parts)


def test_split_partitions_orders_chunks_by_id_not_text():
    chunks = (ClaimedRange("10-0", "10-5", 5), ClaimedRange("9-0", "9-5", 5))
    (only,) = split_partitions("s", StreamBatch(chunks), 1)
    assert [c.first for c in only.chunks] == ["9-0", "10-0"]


def test_empty_batch_has_no_partitions_and_fewer_chunks_than_partitions_is_fine():
    assert split_partitions("s", StreamBatch(), 4) == []
    assert len(split_partitions("s", StreamBatch((ClaimedRange("1-0", "1-1", 2),)), 4)) == 1


def test_split_id_range_covers_the_range_without_overlap():
    parts = split_id_range(100, 199, 3)
    assert parts[0][0] == 100 and parts[-1][1] == 199
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(parts))
    assert split_id_range(5, 5, 4) == [(5, 5)]


def test_offsets_round_trip_with_a_fixed_key_order():
    off = BatchOffset("run1", 3, {"b": StreamBatch((ClaimedRange("1-0", "2-0", 2),), (("0-5", 3),)),
                                  "a": StreamBatch((ClaimedRange("3-0", "3-0", 1),))})
    js = off.to_json()
    assert list(js) == ["v", "run", "seq", "streams"]
    assert list(js["streams"]) == ["a", "b"]
    assert BatchOffset.from_json(js) == BatchOffset.from_json(js)
    assert BatchOffset.from_json(js).to_json() == js
    assert BatchOffset.from_json(js).count == 4


def test_offsets_are_compact_and_other_formats_are_refused_naming_the_fix():
    chunk = ClaimedRange("1700000000000-0", "1700000000005-3", 20)
    off = BatchOffset("r" * 32, 9, {"orders": StreamBatch((chunk,), (("1699999999999-7", 2),))})
    js = off.to_json()
    assert js["v"] == 2
    assert js["streams"]["orders"] == ["1700000000000-0 5-3 20", "r 1699999999999-7 2"]
    assert BatchOffset.from_json(js) == off
    one = json.dumps({"s": StreamBatch((chunk,)).to_compact()}, separators=(",", ":"))
    assert len(one) - len('{"s":}') <= 40  # a stream with one range: well under 60 bytes
    for other in (1, 5, None):  # another format: refused, naming the fix
        with pytest.raises(EventBusError,
                           match=r"format v2, v3 or v4 expected.*new checkpointLocation"):
            BatchOffset.from_json({**js, "v": other})
    with pytest.raises(EventBusError, match=r"format v2, v3 or v4 expected"):  # v3: packed
        BatchOffset.from_json({**js, "v": 3})


def test_offsets_accept_lua_empty_arrays_encoded_as_objects():
    assert StreamBatch.from_json({"chunks": [["1-0", "1-1", 2]], "reclaimed": {}}).count == 2


# -- the claim budget ------------------------------------------------------------------------


def test_first_claim_is_capped_to_the_sync_claim_or_one_chunk_per_partition_per_stream():
    # 100k per trigger: latestOffset claims up to SYNC_CLAIM_ENTRIES itself
    assert first_claim_allowance(100_000, 0, False, 2, 1) == SYNC_CLAIM_ENTRIES
    assert first_claim_allowance(40_000, 0, False, 2, 3) == 40_000
    # many streams and partitions: one chunk of each per partition when that is more
    assert first_claim_allowance(10**6, 0, False, 8, 10) == 2_000 * 8 * 10
    # small batches: never more than what is left of the budget
    assert first_claim_allowance(1_000, 0, False, 2, 1) == 1_000
    assert first_claim_allowance(1_000, 800, False, 2, 1) == 200
    assert first_claim_allowance(1_000, 1_500, False, 2, 1) == 0


def test_first_claim_ships_an_interrupted_preclaim_as_it_is():
    assert first_claim_allowance(100_000, 2_000, True, 2, 1) == 0
    assert first_claim_allowance(None, 2_000, True, 2, 1) == 0
    # interrupted but nothing planned: the quick start applies
    assert first_claim_allowance(100_000, 0, True, 2, 1) == SYNC_CLAIM_ENTRIES


def test_unbounded_batches_claim_everything():
    assert first_claim_allowance(None, 0, False, 2, 1) is None
    assert first_claim_allowance(None, 5_000, False, 2, 1) is None
    assert stream_grants(None, [None, 3, 5]) == [UNBOUNDED_GRANT] * 3


def test_preclaim_tops_up_to_the_budget_or_one_default_batch():
    assert preclaim_allowance(10_000, 100_000, 2_000) == 8_000
    assert preclaim_allowance(None, 100_000, 2_000) == 98_000
    assert preclaim_allowance(1_000, 100_000, 1_000) == 0


@given(st.integers(0, 10**6), st.integers(1, 20))
def test_property_stream_grants_share_exactly_the_budget(left, streams):
    """From MIN_SHARE entries per stream on: fair shares of exactly the budget."""
    left = max(left, streams * MIN_SHARE)
    grants = stream_grants(left, [None] * streams)
    assert not takes_turns(left, streams)
    assert len(grants) == streams
    assert sum(grants) == left
    assert max(grants) - min(grants) <= max(1, left // streams)


@given(st.integers(1, 10**4), st.lists(st.one_of(st.none(), st.integers(0, 100)), min_size=1,
                                       max_size=2_000))
def test_property_streams_take_turns_below_the_smallest_share(left, wants):
    """Below MIN_SHARE entries per stream: in order, each stream up to MIN_SHARE or what it
    has (at least one: a stream with news whose lag says 0 has some), never past the budget; a
    stream is skipped only once the budget is spent, so the ones not reached are a tail (the
    next batch starts there)."""
    left = min(left, len(wants) * MIN_SHARE - 1)
    if left <= 0:
        return
    assert takes_turns(left, len(wants))
    grants = stream_grants(left, wants)
    assert len(grants) == len(wants) and sum(grants) <= left
    for want, grant in zip(wants, grants, strict=True):
        assert 0 <= grant <= (MIN_SHARE if want is None else max(1, min(want, MIN_SHARE)))
    served = [g > 0 for g in grants]
    assert served == sorted(served, reverse=True)  # a head served, a tail waiting
    if not all(served):
        assert sum(grants) == left  # nobody waits while entries are left to give
    whole = [max(1, min(w, MIN_SHARE)) if w is not None else MIN_SHARE for w in wants]
    assert all(g == w for g, w in zip(grants, whole, strict=True) if g > 0 and sum(grants) < left)


def test_many_small_streams_are_each_touched_once_not_every_batch():
    """100,000 streams of two entries each and a budget of 100,000: half the streams give both
    entries to the first batch, the other half to the next (a fair share gave every stream one
    entry in each batch); with lags unknown, MIN_SHARE each."""
    grants = stream_grants(100_000, [2] * 100_000)
    assert grants[:50_000] == [2] * 50_000 and not any(grants[50_000:])
    assert stream_grants(40, [None] * 10) == [MIN_SHARE, MIN_SHARE, 8] + [0] * 7
    assert stream_grants(20_000, [2] * 10_000) == [2] * 10_000  # all of them, whole


@given(st.integers(1, 10**6), st.integers(0, 2 * 10**6), st.booleans(), st.integers(1, 64),
       st.integers(1, 16))
def test_property_first_claim_never_exceeds_the_budget(budget, used, interrupted, parts, streams):
    allowed = first_claim_allowance(budget, used, interrupted, parts, streams)
    assert allowed is not None and 0 <= allowed <= max(0, budget - used)


def test_entries_within_a_byte_bound_and_an_oversized_entry_goes_alone():
    assert entries_within([100, 100, 100], 250, batch_empty=True) == 2
    assert entries_within([100, 100, 100], 300, batch_empty=False) == 3
    assert entries_within([100, 2**20, 100], 1000, batch_empty=True) == 1  # stops before 1 MiB
    # an entry larger than the bound: alone in an empty batch, never wedging the query ...
    assert entries_within([2**20, 100], 1000, batch_empty=True) == 1
    # ... but not added to a batch that holds entries already
    assert entries_within([2**20, 100], 1000, batch_empty=False) == 0
    assert entries_within([], 1000, batch_empty=True) == 0


@given(st.lists(st.integers(1, 10_000), max_size=50), st.integers(1, 50_000), st.booleans())
def test_property_entries_within_never_passes_the_bound_but_by_one_lone_entry(sizes, left,
                                                                              empty):
    n = entries_within(sizes, left, empty)
    assert sum(sizes[:n]) <= left or (n == 1 and empty)
    assert n == len(sizes) or sum(sizes[:n + 1]) > left


def test_min_entries_waits_until_enough_or_the_delay_has_passed():
    assert should_wait(100, 99, waited_ms=10, max_delay_ms=1000)
    assert not should_wait(100, 100, waited_ms=10, max_delay_ms=1000)
    assert not should_wait(100, 5, waited_ms=1000, max_delay_ms=1000)  # the delay releases it
    assert not should_wait(None, 0, waited_ms=0, max_delay_ms=1000)  # option not set
    assert not should_wait(100, None, waited_ms=0, max_delay_ms=1000)  # lag unknown: no wait


def test_the_next_turn_starts_after_the_last_stream_served_by_name():
    """The streams with something to read change between batches (some run dry, new ones
    join): the next turn starts at the first of them listed after the last one served,
    wherever it sits in the list now, and wraps round."""
    listed = [f"s{i}" for i in range(10)]
    assert next_turn(listed, listed, None) == 0
    assert next_turn(listed, ["s4", "s5", "s8", "s9"], "s3") == 0  # s0-s3 ran dry
    assert next_turn(listed, ["s0", "s1", "s8", "s9"], "s5") == 2
    assert next_turn(listed, ["s0", "s1", "s2"], "s9") == 0  # wraps round
    assert next_turn(listed, ["s2", "s6"], "gone") == 0  # the last one served left
