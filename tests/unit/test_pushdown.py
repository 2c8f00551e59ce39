"""Filter pushdown's narrowing (pure): every row the filters keep is inside the range read."""

from __future__ import annotations

import datetime as dt
import operator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
)

from spark_eventbus.core.ids import MAX_TIMESTAMP_MS, StreamId
from spark_eventbus.reads.pushdown import Narrowing, narrowing

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
COMPARE = {GreaterThan: operator.gt, GreaterThanOrEqual: operator.ge, LessThan: operator.lt,
           LessThanOrEqual: operator.le, EqualTo: operator.eq}


def at(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)


def keeps(f: Any, stream: str, entry: StreamId) -> bool:
    """What Spark decides for one row: ``id`` compares as text, ``timestamp`` as an instant
    (the ID's milliseconds)."""
    if isinstance(f, Not):
        return not keeps(f.child, stream, entry)
    column = f.attribute[0]
    value = {"stream": stream, "id": str(entry),  # the column stops at year 9999
             "timestamp": at(min(entry.ms, MAX_TIMESTAMP_MS) * 1000)}[column]
    if isinstance(f, In):
        return value in f.value
    return bool(COMPARE[type(f)](value, f.value))


def test_timestamps_become_exact_millisecond_bounds():
    n = narrowing([GreaterThanOrEqual(("timestamp",), at(1_500)),  # 1.5 ms: from 2 ms
                   LessThan(("timestamp",), at(9_000))])           # before 9 ms: to 8 ms
    assert n.bounds(StreamId(0), StreamId(100)) == (StreamId(2, 0), StreamId(8, 2**64 - 1))
    assert narrowing([GreaterThan(("timestamp",), at(2_000))]).lo_ms == 3
    assert narrowing([LessThanOrEqual(("timestamp",), at(2_999))]).hi_ms == 2
    # = a time between two milliseconds: nothing; before 1970 or past the end: nothing
    assert narrowing([EqualTo(("timestamp",), at(1_500))]).bounds(StreamId(0),
                                                                  StreamId(9)) is None
    assert narrowing([LessThan(("timestamp",), at(-5))]).bounds(StreamId(0),
                                                                StreamId(9)) is None


def test_streams_ids_and_what_is_not_understood():
    n = narrowing([In(("stream",), ("a", "b")), EqualTo(("stream",), "b")])
    assert (n.reads("b"), n.reads("a")) == (True, False)
    ids = narrowing([In(("id",), ("5-1", "7-0", "007-0"))])  # '007-0' is no ID Redis writes
    assert ids.bounds(StreamId(0), StreamId(9)) == (StreamId(5, 1), StreamId(7, 0))
    assert narrowing([EqualTo(("id",), "x")]).bounds(StreamId(0), StreamId(9)) is None
    # text order: bounds only where every ID has as many millisecond digits as the filter's
    t = narrowing([GreaterThanOrEqual(("id",), "1700000000005-9")])
    assert t.bounds(StreamId(1700000000000), StreamId(1700000000009))[0] == StreamId(
        1700000000005, 0)
    assert t.bounds(StreamId(9), StreamId(1700000000009))[0] == StreamId(9)  # "9-0" > it
    for f in (Not(EqualTo(("stream",), "a")), EqualTo(("fields",), "x"),
              EqualTo(("timestamp",), dt.datetime(2026, 1, 1))):  # no zone: an NTZ literal
        assert not narrowing([f]).narrows


ids = st.builds(StreamId, st.sampled_from([0, 7, 99, 1234, 10**12, 1700000000000,
                                           1700000000999, 10**13, MAX_TIMESTAMP_MS,
                                           MAX_TIMESTAMP_MS + 5, 2**64 - 1])
                | st.integers(0, 2**45), st.integers(0, 12))
id_filter = st.builds(lambda kind, i: kind(("id",), str(i)),
                      st.sampled_from(list(COMPARE)), ids) | st.builds(
    lambda i: In(("id",), tuple(str(x) for x in i)), st.lists(ids, min_size=1, max_size=3))
time_filter = st.builds(lambda kind, us: kind(("timestamp",), at(us)),
                        st.sampled_from(list(COMPARE)),
                        st.integers(-10**6, 2**47) | st.sampled_from(
                            [MAX_TIMESTAMP_MS * 1000, MAX_TIMESTAMP_MS * 1000 + 999,
                             MAX_TIMESTAMP_MS * 1000 - 1000]))
stream_filter = st.builds(lambda v: In(("stream",), tuple(v)),
                          st.lists(st.sampled_from("abc"), min_size=1))


@settings(max_examples=400, deadline=None)
@given(st.lists(ids, min_size=1, max_size=30),
       st.lists(id_filter | time_filter | stream_filter, max_size=4))
def test_every_row_the_filters_keep_is_inside_the_range_read(entries, filters):
    n = narrowing(filters)
    first, last = min(entries), max(entries)
    bounds = n.bounds(first, last)
    for stream in "abc":
        for entry in entries:
            if all(keeps(f, stream, entry) for f in filters):
                assert n.reads(stream) and bounds is not None, (filters, entry)
                assert bounds[0] <= entry <= bounds[1], (filters, entry, bounds)
    assert Narrowing().bounds(first, last) == (first, last)
