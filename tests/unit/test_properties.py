"""Property tests (Hypothesis) of the pure parts: IDs, batch splitting, offsets, option parsing
of hostile strings, and the decoder's handling of arbitrary bytes."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from redis.connection import Connection

from spark_eventbus import ConfigError
from spark_eventbus.core.ids import StreamId
from spark_eventbus.core.offsets import BatchOffset, ClaimedRange, StreamBatch
from spark_eventbus.core.planning import split_id_range
from spark_eventbus.options.reader import parse_reader_options
from spark_eventbus.options.writer import parse_sink_options
from spark_eventbus.reads.decoding import BatchBuilder, ValueParser, output_schema
from spark_eventbus.writes.chunking import WriteChunk, xadd_commands
from spark_eventbus.writes.encoding import encode_batch
from spark_eventbus.writes.sink_schema import plan_encoding
from tests.unit.test_planning import split_partitions

U64 = 2**64 - 1
parts = st.integers(0, U64)
ids = st.builds(StreamId, parts, parts)


@given(ids)
def test_ids_print_and_parse_back(i):
    assert StreamId.parse(str(i)) == i
    assert StreamId.parse(str(i).encode()) == i


@given(ids, ids)
def test_id_order_is_the_order_of_milliseconds_then_sequence(a, b):
    assert (a < b) == ((a.ms, a.seq) < (b.ms, b.seq))


@given(ids)
def test_next_and_prev_are_the_neighbours(i):
    if i != StreamId.MAX:
        assert i < i.next() and i.next().prev() == i
    if i != StreamId.MIN:
        assert i.prev() < i and i.prev().next() == i


@given(st.text(max_size=40))
def test_parsing_any_text_gives_an_id_or_a_config_error_naming_it(text):
    try:
        StreamId.parse(text, what="option 'startId'")
    except ConfigError as exc:
        assert "option 'startId'" in str(exc)


ranges = st.builds(lambda ms, n: ClaimedRange(f"{ms}-0", f"{ms + n}-0", n + 1),
                   st.integers(0, 10**15), st.integers(0, 10_000))
batches = st.builds(
    StreamBatch,
    st.lists(ranges, max_size=12, unique_by=lambda c: c.first).map(tuple),
    st.lists(st.tuples(st.builds(lambda ms, s: f"{ms}-{s}", st.integers(0, 10**15),
                                 st.integers(0, 9)), st.integers(1, 50)),
             max_size=30, unique_by=lambda e: e[0]).map(tuple))


@given(batches, st.integers(1, 16))
def test_splitting_puts_every_chunk_and_reclaimed_entry_in_exactly_one_slice(batch, n):
    slices = split_partitions("s", batch, n)
    assert len(slices) <= n
    assert sorted(c.to_json() for s in slices for c in s.chunks) == sorted(
        c.to_json() for c in batch.chunks)
    assert sorted(e for s in slices for e in s.reclaimed) == sorted(batch.reclaimed)
    assert sum(s.count for s in slices) == batch.count
    assert slices == split_partitions("s", batch, n)  # deterministic: replays split alike
    for s in slices:
        firsts = [StreamId.parse(c.first) for c in s.chunks]
        assert firsts == sorted(firsts)


@given(st.integers(0, 10**15), st.integers(0, 10**6), st.integers(1, 64))
def test_id_ranges_split_into_contiguous_pieces_covering_the_range(first, width, n):
    last = first + width
    pieces = split_id_range(first, last, n)
    assert 1 <= len(pieces) <= n
    assert pieces[0][0] == first and pieces[-1][1] == last
    for (_, end), (start, _) in itertools.pairwise(pieces):
        assert start == end + 1


@given(st.text(min_size=1, max_size=20), st.integers(0, 10**9),
       st.dictionaries(st.text(max_size=30), batches, max_size=5))
def test_offsets_survive_a_json_round_trip(run, seq, streams):
    offset = BatchOffset(run, seq, streams)
    back = BatchOffset.from_json(json.loads(json.dumps(offset.to_json())))
    assert back == offset and back.count == offset.count


def test_an_offset_of_another_version_names_the_version_expected():
    with pytest.raises(Exception, match="offset format v2, v3 or v4 expected"):
        BatchOffset.from_json({"v": 99, "run": "r", "seq": 0, "streams": {}})


# Group offsets of many streams, packed (core/packing.py pack_batch): any IDs, not only as
# Redis writes them, and any names (a NUL among them)
_top = st.integers(0, U64)
_canonical_ids = st.builds(lambda ms, sq: f"{ms}-{sq}", _top, st.one_of(st.integers(0, 9), _top))
_any_ids = st.one_of(_canonical_ids, _canonical_ids, _canonical_ids,
                     st.sampled_from(["01-0", "5", "1-+2", "1-1_0", "1-02", "1-2-3"]))
_chunk = st.builds(lambda a, b, n: (a, b, n), _any_ids, _any_ids, st.integers(0, U64))
_parts = st.tuples(st.lists(_chunk, max_size=4),
                   st.lists(st.tuples(_any_ids, st.integers(0, U64)), max_size=4))


@settings(max_examples=300)
@given(st.dictionaries(st.text(max_size=12), _parts, max_size=30))
def test_any_batch_packs_and_unpacks_to_itself_or_is_written_out(streams):
    """A batch packs and reads back unchanged, or (a name with a NUL, an ID not as Redis
    writes it, a chunk ending before its first ID's millisecond) is not packed at all."""
    from spark_eventbus.core.packing import pack_batch, unpack_batch

    text = pack_batch(streams)
    canonical = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")
    ids = [i for c, r in streams.values() for x in c for i in x[:2]] + [
        e[0] for _, r in streams.values() for e in r]
    packable = not any("\0" in n for n in streams) and all(
        canonical.fullmatch(i) for i in ids) and all(
        int(x[1].split("-")[0]) >= int(x[0].split("-")[0])
        for c, _ in streams.values() for x in c)
    assert (text is not None) == packable
    if text is not None:
        assert unpack_batch(text) == {n: (list(c), list(r)) for n, (c, r) in streams.items()}


def test_a_batch_of_many_streams_is_packed_and_read_back():
    from spark_eventbus.core.offsets import PACK_FROM

    streams = {f"device:{i:06d}": StreamBatch(
        (ClaimedRange(f"{1_764_300_000_000 + i * 7919 % 3_600_000}-0",
                      f"{1_764_300_000_000 + i * 7919 % 3_600_000 + 3}-1", 2 + i % 3),),
        ((f"{1_764_200_000_000 + i}-0", 2),) if i % 100 == 0 else ()) for i in range(10_000)}
    few = BatchOffset("r", 4, dict(itertools.islice(streams.items(), PACK_FROM - 1)))
    assert few.to_json()["v"] == 2  # below PACK_FROM: written out
    offset = BatchOffset("r", 4, streams)
    data = offset.to_json()
    assert data["v"] == 3 and data["count"] == 10_000 and list(data) == [
        "v", "run", "seq", "count", "packed"]
    written = json.dumps({"streams": {n: b.to_compact() for n, b in streams.items()}})
    size = len(json.dumps(data))
    print(f"10,000 streams: {size / 10_000:.1f} B per stream packed, "
          f"{len(written) / 10_000:.1f} written out")
    assert size * 3 < len(written)
    back = BatchOffset.from_json(json.loads(json.dumps(data)))
    assert back == offset and back.count == offset.count
    assert json.dumps(back.to_json()) == json.dumps(data)  # Spark compares offsets as text
    odd = BatchOffset("r", 4, {**streams, "a\0b": StreamBatch((ClaimedRange("1-0", "2-0", 2),))})
    assert odd.to_json()["v"] == 2 and BatchOffset.from_json(odd.to_json()) == odd


def test_a_large_batch_is_named_by_its_offset_and_read_back_only_from_its_own_contents():
    """From NAME_FROM bytes of packed contents on, the offset names the batch (v 4): a few
    hundred bytes whatever the streams; the contents read back to the same batch, and any
    other contents (another batch, a damaged copy) are refused."""
    from spark_eventbus.core.offsets import NAME_FROM, NAMED, PACKED

    def batch(n: int) -> BatchOffset:
        return BatchOffset("r", 4, {f"device:{i:06d}": StreamBatch(
            (ClaimedRange(f"{1_764_300_000_000 + i * 7919 % 3_600_000}-0",
                          f"{1_764_300_000_000 + i * 7919 % 3_600_000 + 3}-1", 2 + i % 3),),
            ((f"{1_764_200_000_000 + i}-0", 2),) if i % 100 == 0 else ()) for i in range(n)})

    small, body = batch(1_000).describe()  # packed, under NAME_FROM: the offset lists it
    assert small["v"] == PACKED and body is None and len(small["packed"]) < NAME_FROM
    big = batch(100_000)
    data, body = big.describe()
    assert body is not None and len(body) >= NAME_FROM
    assert data["v"] == NAMED and list(data) == [
        "v", "run", "seq", "count", "entries", "at", "digest"]
    assert data["count"] == 100_000 and data["entries"] == big.count
    assert data["at"] == "device:000000" and len(json.dumps(data)) < 300
    print(f"100,000 streams: offset {len(json.dumps(data))} B naming {len(body):,} B")
    assert BatchOffset.names_contents(json.loads(json.dumps(data)))
    assert not BatchOffset.names_contents(small)
    back = BatchOffset.from_named(json.loads(json.dumps(data)), body)
    assert back == big and back.describe() == (data, body)  # the same text again
    with pytest.raises(Exception, match="reads them"):  # never without its contents
        BatchOffset.from_json(data)
    other = batch(100_001).describe()[1]
    assert other is not None
    with pytest.raises(Exception, match=r"not the ones its offset names.*checkpointLocation"):
        BatchOffset.from_named(data, other)
    with pytest.raises(Exception, match="not the ones its offset names"):
        BatchOffset.from_named(data, body[:-8] + ("B" if body[-8] != "B" else "C") + body[-7:])
    with pytest.raises(Exception, match=r"holds? 100000 streams.*says 99999"):
        BatchOffset.from_named({**data, "count": 99_999}, body)


@pytest.mark.parametrize("damage", [lambda t: t[:-8], lambda t: "!" + t[1:]])
def test_a_damaged_packed_batch_says_so_and_what_to_do(damage):
    streams = {f"s{i}": StreamBatch((ClaimedRange(f"{i}-0", f"{i}-1", 2),)) for i in range(1000)}
    data = BatchOffset("r", 1, streams).to_json()
    data["packed"] = damage(data["packed"])
    with pytest.raises(Exception, match=r"packed offset of a read through a consumer group "
                       r"could not be read.*new checkpointLocation"):
        BatchOffset.from_json(data)


READER_OPTIONS = ["url", "password", "stream", "group", "consumer", "startingPosition",
                  "maxEntriesPerTrigger", "numPartitions", "claimMinIdleMs",
                  "reclaimMaxEntries", "maxDeliveries", "deadLetterStream", "ackMode",
                  "failOnDataLoss", "valueField", "valueSchema", "fieldsType", "startId",
                  "endId", "tlsCaCert"]
SINK_OPTIONS = ["url", "stream", "maxLen", "minId", "trimApproximate", "maxPayloadBytes",
                "idempotent", "chunkSize", "writeId", "batchId", "deadLetterStream"]
hostile = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60) | st.sampled_from(
    ["", " ", "-1", "0", "1e9", "NaN", "inf", "9" * 40, "true ", "∞", "\x00", "{}", "$", ">",
     "redis://", "rediss://h:0/x?ssl_keyfile=/k", "a,,b", ",", "1-2-3", "²", "1²-0", "١٢"])


@settings(max_examples=300)
@given(st.sampled_from(READER_OPTIONS), hostile, st.booleans())
def test_any_reader_option_value_parses_or_fails_naming_the_option(name, value, streaming):
    raw = {"stream": "s", "group": "g", name: value}
    try:
        parse_reader_options(raw, streaming=streaming, warn=False)
    except ConfigError as exc:
        assert name.lower() in str(exc).lower(), str(exc)


@settings(max_examples=200)
@given(st.sampled_from(SINK_OPTIONS), hostile)
def test_any_sink_option_value_parses_or_fails_naming_the_option(name, value):
    raw = {"stream": "s", name: value}
    try:
        parse_sink_options(raw, warn=False)
    except ConfigError as exc:
        assert name.lower() in str(exc).lower(), str(exc)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=20)), max_size=8),
       st.booleans())
def test_any_bytes_decode_into_one_row_with_every_pair(pairs, binary):
    flat = [x for pair in pairs for x in pair]
    builder = BatchBuilder(output_schema(fields_binary=binary), fields_binary=binary,
                           value_parser=None)
    row = builder.build("s", [[b"1-1", flat]], None).column("fields").to_pylist()[0]
    assert len(row) == len(pairs)
    for (k, v), (name, value) in zip(pairs, row, strict=True):
        assert name == k.decode("utf-8", "backslashreplace")
        assert value == (v if binary else v.decode("utf-8", "backslashreplace"))


# The sink encodes a struct column as JSON; the reader parses it back with the same schema
# (valueSchema): every value must come back equal.
INNER = T.StructType([
    T.StructField("i", T.LongType()), T.StructField("x", T.DoubleType()),
    T.StructField("s", T.StringType()), T.StructField("ok", T.BooleanType()),
    T.StructField("xs", T.ArrayType(T.IntegerType())),
    T.StructField("m", T.MapType(T.StringType(), T.StringType())),
    T.StructField("d", T.DateType()),
    T.StructField("n", T.StructType([T.StructField("t", T.StringType())])),
])
ARROW_INNER = pa.struct([
    ("i", pa.int64()), ("x", pa.float64()), ("s", pa.string()), ("ok", pa.bool_()),
    ("xs", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.string())),
    ("d", pa.date32()), ("n", pa.struct([("t", pa.string())])),
])
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
inner_rows = st.fixed_dictionaries({
    "i": st.none() | st.integers(-(2**63), 2**63 - 1),
    "x": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    "s": st.none() | text, "ok": st.none() | st.booleans(),
    "xs": st.none() | st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4),
    "m": st.none() | st.dictionaries(text, st.none() | text, max_size=3).map(
        lambda d: list(d.items())),
    "d": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    "n": st.none() | st.fixed_dictionaries({"t": st.none() | text}),
})


@settings(max_examples=150)
@given(st.lists(inner_rows, min_size=1, max_size=5))
def test_the_sink_encoding_of_a_struct_reads_back_equal_with_value_schema(rows):
    schema = T.StructType([T.StructField("payload", INNER)])
    rb = pa.record_batch({"payload": pa.array(rows, ARROW_INNER)})
    encoded = encode_batch(plan_encoding(schema, stream_option="o"), rb, default_stream="o",
                           max_payload_bytes=1 << 20)
    assert not encoded.rejects
    parser = ValueParser("payload", INNER)
    back = []
    for _, run in encoded.runs:
        for i in range(run.rows):
            fields = {name.encode(): col[i] for name, col in zip(run.names, run.columns,
                                                                    strict=True)}
            fields = {k: v.encode() if isinstance(v, str) else v for k, v in fields.items()}
            value, error = parser.parse(fields)
            assert error is None, error
            back.append(value)
    expected = [{**r, "m": None if r["m"] is None else dict(r["m"])} for r in rows]
    got = [{**v, "m": None if v["m"] is None else dict(v["m"])} for v in back]
    assert got == expected


# The sink's `fields` map mode against a row-by-row reading of its rules: every row is either
# one entry of its target stream (its pairs, in order) or one reject with its rule; rows of a
# stream keep their order, whatever runs the encoder groups them into. Sliced input included
# (Spark hands Arrow batches that are slices of larger buffers).
field_maps = st.none() | st.lists(
    st.tuples(st.sampled_from(["a", "b", "", "ü{x}"]),
              st.none() | st.sampled_from(["1", "", "zz" * 20])), max_size=3)


def _fields_rule(pairs, size_limit):  # type: ignore[no-untyped-def]
    if pairs is None or not pairs:
        return "no fields"
    if any(k == "" for k, _ in pairs):
        return "empty field name"
    if any(v is None for _, v in pairs):
        return "null field"
    if sum(len(k.encode()) + len(v.encode()) for k, v in pairs) > size_limit:
        return "maxPayloadBytes"
    return None


@settings(max_examples=300)
@given(st.lists(st.tuples(field_maps, st.sampled_from(["s1", "s2", None])), max_size=12),
       st.integers(0, 2), st.sampled_from([20, 1 << 20]))
def test_the_fields_map_encoding_keeps_every_row_once_in_order_per_stream(rows, cut, limit):
    schema = T.StructType([T.StructField("stream", T.StringType()),
                           T.StructField("fields", T.MapType(T.StringType(), T.StringType()))])
    padded = [({"k": "v"}.items(), "s1")] * cut + rows
    rb = pa.record_batch({
        "stream": pa.array([s for _, s in padded], pa.string()),
        "fields": pa.array([None if m is None else list(m) for m, _ in padded],
                           pa.map_(pa.string(), pa.string()))}).slice(cut)
    enc = encode_batch(plan_encoding(schema, stream_option=None), rb, default_stream=None,
                       max_payload_bytes=limit)
    want: dict[str, list[list[tuple[str, str]]]] = {}
    want_rejects = []
    for i, (pairs, stream) in enumerate(rows):
        rule = "no target stream" if not stream else _fields_rule(pairs, limit)
        if rule:
            want_rejects.append((i, rule))
        else:
            want.setdefault(stream, []).append(list(pairs))
    got: dict[str, list[list[tuple[str, str]]]] = {}
    for stream, run in enc.runs:
        assert len(run.sizes) == run.rows and all(len(c) == run.rows for c in run.columns)
        for i in range(run.rows):
            got.setdefault(stream, []).append(list(zip(run.names, (c[i] for c in run.columns),
                                                       strict=True)))
    assert got == want
    assert [(r.row, r.rule) for r in enc.rejects] == want_rejects
    # The XADDs the sink sends for these runs (built by Arrow kernels): byte for byte what
    # redis-py sends for the same entries.
    for stream, run in enc.runs:
        chunk = WriteChunk(stream, 0, [run], run.rows)
        expected = [("XADD", stream, "*", *(v for pair in zip(run.names, (c[i] for c in
                                                                         run.columns),
                                                              strict=True) for v in pair))
                    for i in range(run.rows)]
        assert run.arrays is not None
        assert xadd_commands(chunk) == b"".join(Connection().pack_commands(expected))
