from __future__ import annotations

import pytest

from spark_eventbus import ConfigError, StreamId


def test_ids_compare_as_integer_pairs_not_strings():
    assert StreamId.parse("9-0") < StreamId.parse("10-0")
    assert StreamId.parse("5-10") > StreamId.parse("5-9")
    assert sorted(map(StreamId.parse, ["10-0", "9-5", "9-10"])) == [
        StreamId(9, 5), StreamId(9, 10), StreamId(10, 0)]


def test_parse_accepts_bytes_and_bare_milliseconds():
    assert StreamId.parse(b"1700-3") == StreamId(1700, 3)
    assert StreamId.parse("1700") == StreamId(1700, 0)
    assert str(StreamId(1700, 3)) == "1700-3"


@pytest.mark.parametrize("bad", ["", "abc", "1-", "-1", "1-2-3", "1.5-0", "18446744073709551616-0"])
def test_parse_rejects_malformed_ids_naming_the_value(bad):
    with pytest.raises(ConfigError, match="is not a stream ID"):
        StreamId.parse(bad, what="option 'startId' =")


def test_next_and_prev_step_over_the_sequence_boundary():
    top = 2**64 - 1
    assert StreamId(5, top).next() == StreamId(6, 0)
    assert StreamId(6, 0).prev() == StreamId(5, top)
    assert StreamId(0, 0).prev() == StreamId(0, 0)
    assert StreamId(3, 4).next().prev() == StreamId(3, 4)
