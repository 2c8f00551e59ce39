"""Reads without a group, pure parts: offsets, starting positions, batch ends, pieces."""

from __future__ import annotations

import base64
import itertools
import json
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_eventbus.core.ids import StreamId
from spark_eventbus.core.offsets import BatchOffset
from spark_eventbus.core.packing import pack, unpack
from spark_eventbus.core.positions import (
    MIN_SPLIT,
    PACK_FROM,
    Position,
    PositionOffset,
    Tail,
    after_read,
    batch_ranges,
    behind,
    pack_pieces,
    split_ranges,
    starting_position,
    to_tail,
    trimmed_in,
)
from spark_eventbus.errors import EventBusError

# 10 entries 100-0..109-0 added, the first 3 trimmed: 103-0..109-0 held
TRIMMED = Tail("109-0", 10, 7, "103-0", "102-0")


def test_offsets_round_trip_with_a_fixed_key_order_and_each_reader_refuses_the_others():
    o = PositionOffset({"b": Position("5-0", 3), "a": Position("7-1")},
                       {"a": Position("0-0", 0)}, frozenset({"b"}))
    data = o.to_json()
    assert list(data["streams"]) == ["a", "b"] and data["streams"]["a"] == "7-1"
    assert PositionOffset.from_json(data) == o
    assert PositionOffset().to_json() == {"v": 1, "kind": "positions", "streams": {}}
    with pytest.raises(EventBusError, match="new checkpointLocation"):
        PositionOffset.from_json(BatchOffset("run", 1, {}).to_json())
    # and the other way: a group read given the checkpoint of a read without a group
    with pytest.raises(EventBusError, match=r"without a consumer group .* reads with one.*"
                                            r"new checkpointLocation"):
        BatchOffset.from_json(data)


@pytest.mark.parametrize(("position", "tail", "expected"), [
    ("latest", None, Position("0-0", 0)),  # a stream not there yet: all of it, when it comes
    ("earliest", None, Position("0-0", 0)),
    ("5-0", None, Position("5-0", None)),
    ("latest", TRIMMED, Position("109-0", 10)),
    ("earliest", TRIMMED, Position("102-18446744073709551615", 3)),  # trimmed ones not lost
    ("101-0", TRIMMED, Position("101-0", 3)),  # before the first entry held
    ("105-0", TRIMMED, Position("105-0", None)),  # inside: known again at the end
    ("200-0", TRIMMED, Position("200-0", 10)),
    ("earliest", Tail("9-0", 4, 0, None, "9-0"), Position("9-0", 4)),  # emptied stream
])
def test_where_a_stream_starts(position, tail, expected):
    assert starting_position(position, tail) == expected


def test_a_batch_to_the_end_knows_its_count():
    assert to_tail(Position("103-0", 4), Position("109-0", 10)).expected == 6
    assert to_tail(Position("105-0", None), Position("109-0", 10)).expected is None
    assert behind(Position("105-0", 6), TRIMMED.end) == 4
    assert behind(Position("105-0", None), TRIMMED.end) is None
    assert behind(Position("1-0"), None) == behind(Position("109-0", 3), TRIMMED.end) == 0


def test_a_batch_cut_before_the_end_counts_only_where_counts_follow_positions():
    bound = Position("109-0", 10)
    clean = Tail("109-0", 10, 10, "100-0", "0-0")
    step = after_read(Position("101-0", 2), clean, bound, ["102-0", "103-0"], False)
    assert step.end == Position("103-0", 4) and step.expected == 2
    # trimmed past the position: the trimmed entries are counted as expected (then lost)
    step = after_read(Position("100-0", 1), TRIMMED, bound, ["103-0", "104-0"], False)
    assert step.end == Position("104-0", 5) and step.expected == 4
    # a hole after the position inside what is held: not known until the end
    holed = Tail("109-0", 10, 9, "100-0", "104-0")
    assert after_read(Position("101-0", 2), holed, bound, ["102-0"], False).expected is None
    assert after_read(Position("101-0", 2), holed, bound, ["102-0"], True).end == bound


def test_batch_ranges_start_where_a_stream_joined_or_started_again():
    start = PositionOffset({"a": Position("5-0", 5), "c": Position("9-0", 9)})
    end = PositionOffset({"a": Position("8-0", 8), "b": Position("4-0", 4),
                          "c": Position("12-0", 2), "d": Position("1-0", 1)},
                         {"b": Position("1-0", 1), "c": Position("0-0", 0),
                          "d": Position("1-0", 1)})
    assert batch_ranges(start, end) == [("a", Position("5-0", 5), Position("8-0", 8)),
                                        ("b", Position("1-0", 1), Position("4-0", 4)),
                                        ("c", Position("0-0", 0), Position("12-0", 2))]


@given(st.integers(0, 10**6), st.integers(1, 10**6), st.integers(1, 8),
       st.integers(MIN_SPLIT, 10**6))
def test_split_pieces_cover_the_range_exactly_in_order(lo, span, parts, count):
    first, last = Position(f"{lo}-3", 0), Position(f"{lo + span}-7", count)
    pieces = split_ranges([("s", first, last)], parts)
    assert pieces[0].after == first.id and pieces[-1].last == last.id
    for a, b in itertools.pairwise(pieces):
        assert a.last == b.after and StreamId.parse(a.after) < StreamId.parse(a.last)
    assert len(pieces) <= parts
    # counts per piece only when the range is one piece
    assert all(p.expected is None for p in pieces) or pieces[0].expected == count


def test_small_or_whole_ranges_stay_one_piece_and_tasks_pack_by_weight():
    r = ("s", Position("1-0", 0), Position("9000-0", MIN_SPLIT))
    assert len(split_ranges([r], 4)) == 4
    assert len(split_ranges([r], 4, frozenset({"s"}))) == 1  # read whole: the count checks
    small = ("t", Position("1-0", 0), Position("9000-0", MIN_SPLIT - 1))
    assert [p.expected for p in split_ranges([small], 4)] == [MIN_SPLIT - 1]
    many = [(f"s{i}", Position("1-0", 0), Position("5-0", w)) for i, w in
            enumerate([50, 40, 30, 20, 10])]
    bins = pack_pieces(split_ranges(many, 2), 2)
    assert [sum(p.weight for p in b) for b in bins] == [80, 70]
    assert bins == pack_pieces(split_ranges(many, 2), 2)  # deterministic


def test_the_first_piece_of_a_split_range_counts_what_was_trimmed_from_the_head():
    r = ("s", Position("100-0", 10), Position("9000-0", 10 + MIN_SPLIT))
    first, *rest = split_ranges([r], 2)
    assert first.whole_range == (10, 10 + MIN_SPLIT, "9000-0")
    assert all(p.whole_range is None for p in rest)
    held = MIN_SPLIT - 300  # 300 of the range trimmed: the first entry is past the start
    assert trimmed_in(first, Tail("9000-0", 10 + MIN_SPLIT, held, "200-0", "199-9")) == 300
    assert trimmed_in(first, Tail("9000-0", 10 + MIN_SPLIT, MIN_SPLIT, "100-1", "0-0")) == 0
    # a hole inside (XDEL): not counted here
    assert trimmed_in(first, Tail("9000-0", 10 + MIN_SPLIT, held, "200-0", "500-0")) == 0
    # trimmed past the whole range and on: at most the range
    assert trimmed_in(first, Tail("9900-0", 20 + MIN_SPLIT, 5, "9500-0", "9499-0")) == MIN_SPLIT


# The packed form (core/packing.py): offsets of many streams.

_names = st.text(min_size=1, max_size=12)
_canonical = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**64 - 1),
                       st.one_of(st.integers(0, 9), st.integers(0, 2**64 - 1)))
_ids = st.one_of(_canonical, _canonical, _canonical,
                 st.sampled_from(["01-0", "5", "1-+2", "1-1_0", "1-02", "1-2-3", "\u0661-0"]))
_positions = st.builds(Position, _ids, st.one_of(st.none(), st.integers(0, 2**64 - 1)))


@settings(max_examples=500)  # pairs of odd IDs are rare among the draws
@given(st.dictionaries(_names, _positions, max_size=40),
       st.dictionaries(_names, _positions, max_size=10), st.sets(_names, max_size=5))
def test_any_offset_packs_and_unpacks_to_itself_or_is_written_out(streams, joined, whole):
    """Any names (NUL, any code point) and IDs: packed and read back unchanged, or — a name
    with a NUL, an ID not as Redis writes it — not packed at all (written out instead)."""
    offset = PositionOffset(streams, joined, frozenset(whole))
    text = pack([streams, joined], sorted(whole))
    packable = not any("\0" in n for n in (*streams, *joined, *whole)) and all(
        re.fullmatch(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)", p.id)
        and (p.added is None or p.added < 2**64 - 1)  # a count stored +1 in 64 bits
        for p in (*streams.values(), *joined.values()))
    assert (text is not None) == packable
    if text is not None:
        (s, j), w = unpack(text, 2, Position)
        assert PositionOffset(s, j, frozenset(w)) == offset
    assert PositionOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset


@settings(max_examples=300)
@given(st.dictionaries(_names, _positions, min_size=1, max_size=40), st.data())
def test_sections_over_the_first_sections_names_pack_as_bitmaps_and_read_back(streams, data):
    """The streams that joined (and those read whole) are streams of the offset: their names
    are packed as a bitmap over the first section's (body version 2), read back unchanged; a
    body without such a section stays version 1, which every version reads."""
    names = sorted(streams)
    joined = {n: data.draw(_positions) for n in data.draw(st.sets(st.sampled_from(names)))}
    whole = data.draw(st.sets(st.sampled_from(names), max_size=5))
    text = pack([streams, joined], sorted(whole))
    if text is None:  # an ID or a name that cannot be packed (the test above)
        return
    (s, j), w = unpack(text, 2, Position)
    assert (s, j, set(w)) == (streams, joined, whole)
    assert zlib.decompress(base64.b64decode(text))[0] == (2 if joined or whole else 1)


# Packed by the version before bitmaps (body version 1): streams a, b, c; a and c joined
# (at "earliest" before 1700000000000-0, and at 0-0); b read whole.
_BODY_1 = ("eAFjZGaAAFYozZDx9Hw3IwNDIkMSQzJMLAXKOAETgNIwzUD1YMAGpWEUF5TBBKVh6mHyiQzJ/9Mh9sGE"
           "/kMBjA8zGhcNU5cEY6DTABBhEeU=")


def test_a_checkpoint_packed_before_bitmaps_reads_the_same():
    streams = {"a": Position("1700000000000-0", 5), "b": Position("1700000000100-3", None),
               "c": Position("1700000000200-1", 9)}
    joined = {"a": Position(f"1699999999999-{2**64 - 1}", 0), "c": Position("0-0", 0)}
    assert unpack(_BODY_1, 2, Position) == ([streams, joined], ["b"])
    now = pack([streams, joined], ["b"])
    assert now is not None and zlib.decompress(base64.b64decode(now))[0] == 2
    assert unpack(now, 2, Position) == ([streams, joined], ["b"])


def test_many_streams_are_packed_and_cost_a_fraction_of_the_written_out_form():
    streams = {f"device:{i:06d}": Position(f"{1_764_300_000_000 + i * 7919 % 3_600_000}-0",
                                           i % 500) for i in range(PACK_FROM)}
    few = dict(itertools.islice(streams.items(), PACK_FROM - 1))
    assert PositionOffset(few).to_json()["v"] == 1  # below PACK_FROM: readable
    packed = PositionOffset(streams, {"device:000001": Position("0-0", 0)}).to_json()
    assert packed["v"] == 2 and packed["count"] == PACK_FROM
    written = json.dumps({"streams": {n: p.to_text() for n, p in streams.items()}})
    assert len(json.dumps(packed)) * 2 < len(written)
    assert PositionOffset.from_json(packed) == PositionOffset(
        streams, {"device:000001": Position("0-0", 0)})
    # read again (latestOffset, partitions): the same offset, not unpacked again; another
    # offset's text is read for itself
    assert PositionOffset.from_json(dict(packed)) is PositionOffset.from_json(packed)
    other = PositionOffset(streams, {"device:000002": Position("0-0", 0)})
    assert PositionOffset.from_json(other.to_json()) == other
    assert PositionOffset.from_json(packed).joined == {"device:000001": Position("0-0", 0)}
    # IDs that pair up only when split together ("5" and "1-2-3"): written out
    odd_ids = {**streams, "device:000002": Position("5", None),
               "device:000003": Position("1-2-3", None)}
    assert PositionOffset(odd_ids).to_json()["v"] == 1
    assert PositionOffset.from_json(PositionOffset(odd_ids).to_json()) == PositionOffset(odd_ids)
    # IDs at the top of their range: "earliest" before a first entry 6-0 is 5-(2**64 - 1)
    top = {**streams, "device:000002": Position(f"5-{2**64 - 1}", 0),
           "device:000003": Position(f"{2**64 - 1}-{2**64 - 1}", None)}
    assert PositionOffset.from_json(PositionOffset(top).to_json()) == PositionOffset(top)
    assert PositionOffset(top).to_json()["v"] == 2
    # a name with a NUL: the whole offset is written out, still read back
    odd = {**streams, "a\0b": Position("1-0", None)}
    assert PositionOffset(odd).to_json()["v"] == 1
    assert PositionOffset.from_json(PositionOffset(odd).to_json()) == PositionOffset(odd)


_OTHER_BODY = base64.b64encode(zlib.compress(b"\x07" + b"x" * 9)).decode()  # a version unknown


@pytest.mark.parametrize("damage", [lambda t: t[:-8], lambda t: "!" + t[1:],
                                    lambda t: _OTHER_BODY])
def test_a_damaged_packed_offset_says_so_and_what_to_do(damage):
    streams = {f"s{i}": Position(f"{i}-0", i) for i in range(PACK_FROM)}
    data = PositionOffset(streams).to_json()
    data["packed"] = damage(data["packed"])
    with pytest.raises(EventBusError, match=r"packed offset .* could not be read.*new "
                       r"checkpointLocation"):
        PositionOffset.from_json(data)
