"""No byte string and no JSON text can make the reader's decoder or the sink's encoder raise.

Text that is not valid Unicode reaches the connector from producers in other languages: a
JavaScript ``JSON.stringify`` of a string cut inside an emoji carries a lone surrogate escape
(``"\\ud83d"``), CESU-8 writers put surrogate bytes (``ED A0 BD``) in UTF-8, and Spark passes
``CAST(binary AS STRING)`` through unchecked. One such entry must become that entry's ``error``
(reader) or a dead letter (sink), never an exception that fails its batch on every retry.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from spark_eventbus.errors import printable
from spark_eventbus.reads.decoding import (
    BatchBuilder,
    ValueParser,
    output_schema,
    parse_value_schema,
)
from spark_eventbus.writes.chunking import Chunker, xadd_commands
from spark_eventbus.writes.encoding import encode_batch
from spark_eventbus.writes.sink_schema import plan_encoding

# Every type valueSchema supports, at the top level and nested in structs, arrays and maps.
EVERY_TYPE = parse_value_schema(
    "s STRING, i INT, l BIGINT, sh SMALLINT, ti TINYINT, d DOUBLE, f FLOAT, b BOOLEAN, "
    "ts TIMESTAMP, dt DATE, bin BINARY, dec DECIMAL(10,2), arr ARRAY<STRING>, "
    "m MAP<STRING, STRING>, st STRUCT<x: STRING, y: ARRAY<MAP<STRING, INT>>, z: BINARY>, "
    "am ARRAY<MAP<STRING, ARRAY<DECIMAL(38,18)>>>")
FIELD_NAMES = [f.name for f in EVERY_TYPE.fields] + ["x", "y", "z"]
SURROGATES = st.integers(0xD800, 0xDFFF)
CODE_UNITS = st.one_of(SURROGATES, st.integers(0, 0xFFFF))


# Built once: a strategy made inside an @st.composite is built and validated again at every
# draw (half of this file's time went there)
_STRING_PARTS = st.lists(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\'),
            max_size=4),
    CODE_UNITS.map(lambda u: f"\\u{u:04x}"),
    SURROGATES.map(lambda u: f"\\u{u:04X}"),
    st.just("\\ud83d\\ude80"), st.just("\\ud83d")), max_size=5)


def json_string() -> st.SearchStrategy[str]:
    """A JSON string literal mixing plain text, any \\uXXXX escape (surrogates often), and
    whole or cut surrogate pairs."""
    return _STRING_PARTS.map(lambda parts: '"' + "".join(parts) + '"')


json_scalar = st.one_of(
    json_string(), st.integers(-(2 ** 70), 2 ** 70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["true", "false", "null", "1e400", "-0", "9" * 300, '"2026-01-02"',
                     '"2026-01-02T03:04:05Z"', '"12.345"', '"NaN"']))
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.one_of(st.sampled_from(FIELD_NAMES).map(json.dumps),
                                     json_string()), inner), max_size=4)
        .map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}")),
    max_leaves=8)
json_document = st.lists(st.tuples(st.sampled_from(FIELD_NAMES), json_value), max_size=8).map(
    lambda kv: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in kv) + "}")


def payload_bytes() -> st.SearchStrategy[bytes]:
    """JSON text (UTF-8, or with CESU-8 surrogate bytes spliced in) and arbitrary bytes."""
    return st.one_of(
        json_document.map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.tuples(json_document, st.sampled_from([b"\xed\xa0\xbd", b"\xed\xbf\xbf", b"\xff"]))
        .map(lambda tb: tb[0].encode().replace(b'"s":"', b'"s":"' + tb[1], 1)),
        st.binary(max_size=64))


def _builder(schema: T.StructType) -> BatchBuilder:
    return BatchBuilder(output_schema(schema), fields_binary=False,
                        value_parser=ValueParser("payload", schema))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(payload_bytes(), min_size=1, max_size=4))
def test_no_payload_makes_the_decoder_raise_and_each_gets_a_value_or_an_error(payloads):
    entries = [[f"1-{i}".encode(), [b"payload", p]] for i, p in enumerate(payloads)]
    rows = _builder(EVERY_TYPE).build("s", entries, 1).to_pylist()
    assert [r["id"] for r in rows] == [f"1-{i}" for i in range(len(payloads))]
    for r in rows:
        assert (r["value"] is None) != (r["error"] is None), r


@given(st.lists(CODE_UNITS, min_size=1, max_size=4),
       st.sampled_from(["s", "arr", "m", "st.x", "bin", "m-key", "am-key"]))
def test_a_lone_surrogate_escape_is_an_error_naming_its_json_path(units, where):
    text = "".join(f"\\u{u:04x}" for u in units)
    decoded = json.loads(f'"{text}"')
    has_lone = any(0xD800 <= ord(c) <= 0xDFFF for c in decoded)
    doc, path = {
        "s": (f'{{"s":"{text}"}}', "s"),
        "arr": (f'{{"arr":["ok","{text}"]}}', "arr[1]"),
        "m": (f'{{"m":{{"k":"{text}"}}}}', 'm["k"]'),
        "st.x": (f'{{"st":{{"x":"{text}"}}}}', "st.x"),
        "bin": (f'{{"bin":"{text}"}}', "bin"),
        "m-key": (f'{{"m":{{"{text}":"v"}}}}', "m["),
        "am-key": (f'{{"am":[{{}},{{"{text}":[1]}}]}}', "am[1]["),
    }[where]
    value, error = ValueParser("payload", EVERY_TYPE).parse({b"payload": doc.encode()})
    if has_lone:
        assert value is None
        assert error is not None and "lone surrogate" in error, error
        assert f"valueSchema: {path}" in error, error
        error.encode("utf-8")  # the message itself is valid text
    else:
        assert error is None, error


def test_the_javascript_cut_emoji_payload_of_the_issue():
    doc = '{"order_id":2,"customer":"\U0001F680\\ud83d","amount":12.5}'.encode()
    schema = parse_value_schema("order_id BIGINT, customer STRING, amount DOUBLE")
    rows = _builder(schema).build("orders", [[b"5-0", [b"payload", doc]],
                                             [b"5-1", [b"payload", b'{"order_id":3}']]], 1)
    bad, good = rows.to_pylist()
    assert bad["value"] is None
    assert bad["error"] == (
        "JSON in field 'payload' does not match valueSchema: customer: text holds a lone "
        "surrogate \\ud83d at character 1, which is not valid Unicode (a UTF-16 pair cut in "
        "two, e.g. by JavaScript's slice())")
    assert good["value"] == {"order_id": 3, "customer": None, "amount": None}


def test_cesu8_surrogate_bytes_are_malformed_json_not_a_string():
    value, error = ValueParser("payload", EVERY_TYPE).parse(
        {b"payload": b'{"s":"\xed\xa0\xbd"}'})
    assert value is None
    assert error == ("malformed JSON in field 'payload': not valid UTF-8 text (invalid "
                     "continuation byte at byte 6)")


@pytest.mark.parametrize("doc, path", [
    (b'{"f": 1' + b"0" * 400 + b'}', "f"),  # float() of a 401-digit integer overflows
    (b'{"dec": 1e100}', "dec"),  # quantize past the 28-digit default context
    (b'{"am": [{"k": [1e60]}]}', 'am[0]["k"][0]'),
    (b'{"dec": "Infinity"}', "dec"),
])
def test_numbers_too_large_for_their_type_are_errors_not_exceptions(doc, path):
    value, error = ValueParser("payload", EVERY_TYPE).parse({b"payload": doc})
    assert value is None and error is not None and f": {path}: expected" in error, error


def test_deep_nesting_is_malformed_json_not_a_recursion_error():
    value, error = ValueParser("payload", EVERY_TYPE).parse({b"payload": b"[" * 100_000})
    assert value is None and error is not None and error.startswith("malformed JSON"), error


@pytest.mark.parametrize("raw", [b"\xed\xa0\xbd", b"a\xed\xbf\xbfb", b"\xed\xa0\xbd\xed\xb6\x80"])
def test_surrogate_bytes_in_field_names_and_values_are_escaped(raw):
    rows = BatchBuilder(output_schema(None), fields_binary=False, value_parser=None).build(
        "s", [[b"1-0", [raw, raw, b"k", b"v"]]], 1).to_pylist()
    escaped = raw.decode("utf-8", "backslashreplace")
    assert "\\xed" in escaped
    assert rows[0]["fields"] == [(escaped, escaped), ("k", "v")]


@given(st.text())
def test_printable_text_always_encodes_and_keeps_valid_text_unchanged(text):
    out = printable(text)
    out.encode("utf-8")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert out != text
    else:
        assert out == text


# -- sink ---------------------------------------------------------------------------------------

_raw_text = st.one_of(
    st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=6), st.just(b"a\xed\xa0\xbdb"), st.none())


def _as_string(values: list[bytes | None]) -> pa.Array:
    """A string array holding exactly these bytes (as Spark hands over a binary cast)."""
    return pa.array(values, pa.binary()).view(pa.string())


SINK_SCHEMA = T.StructType([
    T.StructField("stream", T.StringType()),
    T.StructField("t", T.StringType()),
    T.StructField("st", T.StructType([T.StructField("s", T.StringType()),
                                      T.StructField("a", T.ArrayType(T.StringType()))])),
    T.StructField("m", T.MapType(T.StringType(), T.StringType())),
])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.sampled_from([b"out", b"other"]), _raw_text),
                          _raw_text, _raw_text, _raw_text, _raw_text),
                min_size=1, max_size=8))
def test_no_string_bytes_make_the_sink_encoder_raise_and_every_row_is_written_or_rejected(rows):
    streams, texts, inner, elems, keys = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    struct = pa.StructArray.from_arrays([_as_string(inner), pa.ListArray.from_arrays(
        pa.array(range(n + 1), pa.int32()), _as_string(elems))], ["s", "a"])
    maps = pa.MapArray.from_arrays(pa.array([0, *[i + 1 for i in range(n)]], pa.int32()),
                                   _as_string([k or b"k" for k in keys]),
                                   _as_string([b"v"] * n))
    rb = pa.RecordBatch.from_arrays([_as_string(streams), _as_string(texts), struct, maps],
                                    names=["stream", "t", "st", "m"])
    encoded = encode_batch(plan_encoding(SINK_SCHEMA, stream_option=None), rb,
                           default_stream=None, max_payload_bytes=1 << 20)
    written = sum(run.rows for _, run in encoded.runs)
    assert written + len(encoded.rejects) == n
    for rej in encoded.rejects:
        rej.reason.encode("utf-8")
    chunker = Chunker(3)
    for stream, run in encoded.runs:
        for chunk in chunker.add(stream, run):
            xadd_commands(chunk)
    for chunk in chunker.flush():
        xadd_commands(chunk)
    # A top-level string column is written byte for byte, whatever its bytes.
    written_t = [v for _, run in encoded.runs for name, col in zip(run.names, run.columns,
                                                                   strict=True)
                 if name == "t" for v in col]
    for v in written_t:
        assert (v if isinstance(v, bytes) else v.encode()) in texts
