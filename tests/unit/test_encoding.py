"""The sink's encoding rules: schema checks, field mapping, rejects, deterministic chunking."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from redis.connection import Connection

from spark_eventbus import ConfigError
from spark_eventbus.writes.chunking import Chunker, WriteChunk, xadd_commands
from spark_eventbus.writes.encoding import Run, dead_letter_run, encode_batch
from spark_eventbus.writes.sink_schema import plan_encoding

S = T.StringType()


def _schema(**cols: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(k, v) for k, v in cols.items()])


def _entries(plan, rb, **kw):  # type: ignore[no-untyped-def]
    enc = encode_batch(plan, rb, default_stream=kw.pop("stream", "o"),
                       max_payload_bytes=kw.pop("max_payload_bytes", 1 << 20))
    rows = []
    for stream, run in enc.runs:
        for i in range(run.rows):
            rows.append((stream, dict(zip(run.names, (c[i] for c in run.columns), strict=True))))
    return rows, enc.rejects


@pytest.mark.parametrize(("schema", "option", "message"), [
    (_schema(n=S), None, "no target stream: set option 'stream'"),
    (_schema(stream=T.LongType(), n=S), None, "column 'stream' has type bigint"),
    (_schema(d=T.DayTimeIntervalType()), "o", "column 'd' has type interval day to second"),
    (_schema(s=T.StructType([T.StructField("y", T.YearMonthIntervalType())])), "o",
     "column 's' has type struct<y:interval year to month>"),
    (_schema(fields=T.MapType(T.LongType(), S)), "o", "column 'fields' has type map<bigint"),
    (_schema(fields=T.MapType(S, T.ArrayType(S))), "o", "must be a map of string keys"),
    (_schema(stream=S), None, "no column to write besides 'stream'"),
])
def test_schema_errors_name_the_column_and_the_rule(schema, option, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        plan_encoding(schema, stream_option=option)


def test_the_stream_option_overrides_a_stream_column_which_is_then_not_written():
    """Kafka's rule for its topic option: the option wins; the column (of any type, e.g. the
    reader's source stream name) neither routes nor becomes a field."""
    for stream_type in (S, T.LongType()):
        plan = plan_encoding(_schema(stream=stream_type, n=S), stream_option="x")
        assert not plan.stream_column
        assert [c.name for c in plan.columns] == ["n"]
    rb = pa.record_batch({"stream": ["src", "src"], "n": ["1", "2"]})
    rows, rejects = _entries(plan_encoding(_schema(stream=S, n=S), stream_option="x"), rb,
                             stream="x")
    assert rows == [("x", {"n": "1"}), ("x", {"n": "2"})] and not rejects
    fields = plan_encoding(_schema(stream=S, fields=T.MapType(S, S)), stream_option="x")
    assert not fields.stream_column


def test_columns_map_to_text_bytes_and_json():
    ts = dt.datetime(2026, 5, 6, 7, 8, 9, 120000, tzinfo=dt.timezone.utc)
    rb = pa.record_batch({
        "s": ["é", ""], "b": [b"\x00\xff", b""], "i": pa.array([1, -2], pa.int16()),
        "f": [0.1, float("nan")], "inf": [float("inf"), float("-inf")],
        "dec": pa.array([Decimal("1.20"), Decimal("-3.00")], pa.decimal128(5, 2)),
        "ok": [True, False], "day": [dt.date(2026, 1, 2), dt.date(1999, 12, 31)],
        "ts": pa.array([ts, ts], pa.timestamp("us", tz="America/New_York")),
        "ntz": pa.array([dt.datetime(2026, 1, 1, 1, 2, 3)] * 2, pa.timestamp("us")),
        "st": pa.array([{"a": 1, "raw": b"\x01", "m": [("k", 2)]},
                        {"a": None, "raw": None, "m": []}],
                       pa.struct([("a", pa.int64()), ("raw", pa.binary()),
                                  ("m", pa.map_(pa.string(), pa.int64()))])),
    })
    schema = _schema(s=S, b=T.BinaryType(), i=T.ShortType(), f=T.DoubleType(),
                     inf=T.DoubleType(), dec=T.DecimalType(5, 2), ok=T.BooleanType(),
                     day=T.DateType(), ts=T.TimestampType(), ntz=T.TimestampNTZType(),
                     st=T.StructType([T.StructField("a", T.LongType()),
                                      T.StructField("raw", T.BinaryType()),
                                      T.StructField("m", T.MapType(S, T.LongType()))]))
    rows, rejects = _entries(plan_encoding(schema, stream_option="o"), rb)
    assert rejects == []
    first, second = rows[0][1], rows[1][1]
    assert (first["s"], first["b"], first["i"], first["f"]) == ("é", b"\x00\xff", "1", "0.1")
    assert (second["s"], second["b"], second["i"], second["f"]) == ("", b"", "-2", "NaN")
    assert (first["inf"], second["inf"]) == ("Infinity", "-Infinity")
    assert (first["dec"], first["ok"], second["ok"]) == ("1.20", "true", "false")
    assert (first["day"], second["day"]) == ("2026-01-02", "1999-12-31")
    assert first["ts"] == "2026-05-06T07:08:09.120000Z"  # UTC whatever the session zone
    assert first["ntz"] == "2026-01-01T01:02:03.000000"
    assert json.loads(first["st"]) == {"a": 1, "raw": "AQ==", "m": {"k": 2}}
    assert json.loads(second["st"]) == {"a": None, "raw": None, "m": {}}


def test_null_columns_are_left_out_and_rows_keep_their_order():
    rb = pa.record_batch({"a": ["1", None, "3", None], "b": ["x", "y", None, None]})
    rows, rejects = _entries(plan_encoding(_schema(a=S, b=S), stream_option="o"), rb)
    assert rows == [("o", {"a": "1", "b": "x"}), ("o", {"b": "y"}), ("o", {"a": "3"})]
    assert [(r.row, r.rule, r.column) for r in rejects] == [(3, "no fields", None)]


def test_rejects_carry_the_rule_the_column_and_what_could_be_encoded():
    rb = pa.record_batch({"stream": ["s1", None, "s2", "s1"], "k": ["a", "b", "c", "d"],
                          "big": ["x", "y", "z" * 100, "w"],
                          "arr": pa.array([[1.0], [2.0], [3.0], [float("nan")]])})
    schema = _schema(stream=S, k=S, big=S, arr=T.ArrayType(T.DoubleType()))
    rows, rejects = _entries(plan_encoding(schema, stream_option=None), rb, stream=None,
                             max_payload_bytes=50)
    assert [(s, e["k"]) for s, e in rows] == [("s1", "a")]
    got = [(r.row, r.rule, r.column, r.stream) for r in rejects]
    assert got == [(1, "no target stream", "stream", None), (2, "maxPayloadBytes", "big", "s2"),
                   (3, "unsupported value", "arr", "s1")]
    assert dict(rejects[1].fields)["big"] == "z" * 100  # dead letters keep the data
    dl = dead_letter_run(rejects[1], [("dlq.sink.batch", "7")])
    assert dict(zip(dl.names, (c[0] for c in dl.columns), strict=True))["dlq.reason"].startswith(
        "entry of 113 bytes is over maxPayloadBytes=50")
    assert dl.names[-4:] == ("dlq.reason", "dlq.column", "dlq.target.stream", "dlq.sink.batch")


def test_fields_map_mode():
    rb = pa.record_batch({"fields": pa.array(
        [[("a", b"1"), ("b", b"")], None, [], [("", b"x")], [("z", None)]],
        pa.map_(pa.string(), pa.binary())), "other": ["p", "q", "r", "s", "t"]})
    schema = _schema(fields=T.MapType(S, T.BinaryType()), other=S)
    rows, rejects = _entries(plan_encoding(schema, stream_option="o"), rb)
    assert rows == [("o", {"a": b"1", "b": b""})]  # 'other' is not written
    assert [r.rule for r in rejects] == ["no fields", "no fields", "empty field name",
                                         "null field"]


def _run(names: tuple[str, ...], columns: list[list[str]], sizes: list[int] | None = None
         ) -> Run:
    rows = len(columns[0])
    return Run(names, columns, rows, np.array(sizes or [10] * rows, dtype=np.int64))


def _chunks(slices: list[int], size: int, max_bytes: int = 1 << 20,
            sizes: list[int] | None = None) -> list[tuple[str, int, list[str]]]:
    chunker, out, n = Chunker(size, max_bytes), [], 0
    for k in slices:
        run = _run(("n",), [[str(i) for i in range(n, n + k)]],
                   sizes[n:n + k] if sizes else None)
        n += k
        for c in chunker.add("s", run):
            out.append((c.stream, c.index, [v for r in c.runs for v in r.columns[0]]))
    for c in chunker.flush():
        out.append((c.stream, c.index, [v for r in c.runs for v in r.columns[0]]))
    return out


def test_chunks_do_not_depend_on_how_the_input_was_sliced():
    a = _chunks([10], 4)
    assert a == _chunks([3, 3, 4], 4) == _chunks([1] * 10, 4) == _chunks([7, 0, 3], 4)
    assert [(i, len(v)) for _, i, v in a] == [(0, 4), (1, 4), (2, 2)]


def test_chunks_are_bounded_in_bytes_too_and_a_huge_row_travels_alone():
    sizes = [10, 10, 10, 100, 10, 10, 10, 10]
    for slices in ([8], [1] * 8, [3, 5]):
        got = [v for _, _, v in _chunks(slices, 5, max_bytes=35, sizes=sizes)]
        assert got == [["0", "1", "2"], ["3"], ["4", "5", "6"], ["7"]]


_text = st.text(st.sampled_from(list("%%d$*\r\n:{}ab")) | st.characters(codec="utf-8"),
               max_size=12)
_runs = st.lists(st.integers(1, 4).flatmap(lambda k: st.tuples(
    st.lists(_text, min_size=k, max_size=k),
    st.lists(st.lists(_text | st.binary(max_size=12), min_size=k, max_size=k), min_size=1,
             max_size=6))), min_size=1, max_size=4)


@settings(max_examples=200)
@given(_text, _runs)
def test_xadd_commands_are_what_redis_py_sends_for_each_row(stream, runs):
    """The sink's pre-encoded XADDs, byte for byte what redis-py packs for the same rows
    (field names and values with '%', '$', CR/LF, unicode; str and bytes; 1-4 fields)."""
    chunk_runs, expected = [], []
    for names, rows in runs:
        columns = [[row[j] for row in rows] for j in range(len(names))]
        chunk_runs.append(Run(tuple(names), columns, len(rows), np.zeros(len(rows), np.int64)))
        for row in rows:
            expected.append(("XADD", stream, "*", *(v for pair in zip(names, row, strict=True)
                                                     for v in pair)))
    chunk = WriteChunk(stream, 0, chunk_runs, len(expected))
    assert xadd_commands(chunk) == b"".join(Connection().pack_commands(expected))


@settings(max_examples=150)
@given(_text, st.lists(st.tuples(st.none() | _text, st.none() | st.binary(max_size=12)),
                       min_size=1, max_size=30), st.integers(1, 7))
def test_xadd_commands_of_encoded_arrow_rows_are_what_redis_py_sends(stream, rows, size):
    """The same for runs the encoder made from Arrow columns (encoded by Arrow kernels, nulls
    left out, cut into chunks of ``size`` rows)."""
    rb = pa.record_batch({"t": pa.array([t for t, _ in rows], pa.string()),
                          "b%": pa.array([b for _, b in rows], pa.binary())})
    plan = plan_encoding(_schema(t=S, **{"b%": T.BinaryType()}), stream_option=stream)
    enc = encode_batch(plan, rb, default_stream=stream, max_payload_bytes=1 << 20)
    assert all(run.arrays is not None for _, run in enc.runs)
    chunker = Chunker(size)
    chunks = [c for s, run in enc.runs for c in chunker.add(s, run)] + list(chunker.flush())
    expected = [("XADD", stream, "*", *(v for name, value in (("t", t), ("b%", b))
                                        if value is not None for v in (name, value)))
                for t, b in rows if t is not None or b is not None]
    got = b"".join(xadd_commands(c) for c in chunks)
    assert got == b"".join(Connection().pack_commands(expected))


def test_without_hiredis_commands_pack_to_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Executors that get the package as --py-files have redis-py but no hiredis: redis-py's
    packer then gives the bytes hiredis gives (any argument type the package sends); a command
    already packed goes as it is, in its place, with either."""
    from spark_eventbus.redisio import wire

    packed = wire.Packed("s", b"*4\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-1\r\n")
    assert packed.data == wire.packed("XACK", "s", "g", "1-1")
    commands = [("XADD", "s", "*", "f", "é\x00", b"\xff\x00"), packed, ("XACK", "s", "g", 1, 2.5),
                ("EVALSHA", "a" * 40, 1, "k", "")]
    with_hiredis = wire.pack(commands)
    assert b"".join(with_hiredis) == b"".join(wire.pack(commands[:1])) + packed.data + b"".join(
        wire.pack(commands[2:]))
    assert wire.command_key(packed) == "s"
    monkeypatch.setattr(wire, "_hiredis_pack", None)
    assert b"".join(wire.pack(commands)) == b"".join(with_hiredis)
