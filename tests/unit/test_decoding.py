from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, IntegerType, MapType, StringType, StructType

from spark_eventbus import ConfigError
from spark_eventbus.reads.decoding import (
    BatchBuilder,
    ValueParser,
    output_schema,
    parse_value_schema,
)


def test_ddl_and_json_schemas_parse_to_the_same_struct():
    ddl = parse_value_schema("id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, INT>, "
                             "price DECIMAL(10,2), at TIMESTAMP, inner STRUCT<a: INT, `b c`: "
                             "STRING>")
    assert [f.name for f in ddl.fields] == ["id", "tags", "attrs", "price", "at", "inner"]
    assert ddl["tags"].dataType == ArrayType(StringType(), True)
    assert ddl["attrs"].dataType == MapType(StringType(), IntegerType(), True)
    assert [f.name for f in ddl["inner"].dataType.fields] == ["a", "b c"]
    assert parse_value_schema(ddl.json()) == ddl


@pytest.mark.parametrize("bad", ["", "id", "id INTEGR", "a INT,", "m MAP<INT, STRING>",
                                 "{not json"])
def test_bad_value_schema_names_the_option(bad):
    with pytest.raises(ConfigError, match="option 'valueSchema'"):
        parse_value_schema(bad)


def _parser(ddl: str) -> ValueParser:
    return ValueParser("payload", parse_value_schema(ddl))


def test_value_parser_is_strict_about_types_and_reports_the_path():
    p = _parser("n INT, s STRING, xs ARRAY<DOUBLE>, inner STRUCT<ok: BOOLEAN>")
    value, err = p.parse({b"payload": json.dumps(
        {"n": 1, "s": "x", "xs": [1, 2.5], "inner": {"ok": True}, "extra": 1}).encode()})
    assert err is None and value == {"n": 1, "s": "x", "xs": [1.0, 2.5], "inner": {"ok": True}}
    assert p.parse({b"payload": b'{"n": 2}'}) == ({"n": 2, "s": None, "xs": None, "inner": None},
                                                 None)
    _, err = p.parse({b"payload": b'{"n": "1"}'})
    assert "n: expected int" in err
    _, err = p.parse({b"payload": b'{"inner": {"ok": 1}}'})
    assert "inner.ok: expected boolean" in err
    _, err = p.parse({b"payload": b'{"n": 3000000000}'})
    assert "expected int" in err
    _, err = p.parse({b"payload": b"[1"})
    assert "malformed JSON" in err
    assert p.parse({})[1] == "field 'payload' is missing"


def test_timestamps_and_decimals_convert():
    p = _parser("at TIMESTAMP, d DATE, price DECIMAL(5,2)")
    value, err = p.parse({b"payload": b'{"at": "2024-01-02T03:04:05Z", "d": "2024-01-02", '
                                      b'"price": 12.345}'})
    assert err is None
    assert value["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert str(value["price"]) == "12.35" or str(value["price"]) == "12.34"
    assert p.parse({b"payload": b'{"price": 123456}'})[1] is not None


def test_batch_builder_makes_the_declared_arrow_schema():
    schema = output_schema(parse_value_schema("n INT"))
    b = BatchBuilder(schema, fields_binary=False, value_parser=_parser("n INT"))
    entries = [[b"1700000000000-0", [b"payload", b'{"n": 1}', b"k", b"v"]],
               [b"1700000000001-5", [b"payload", b"oops"]]]
    batch = b.build("orders", entries, [1, 3])
    assert batch.schema == b.arrow_schema
    rows = batch.to_pylist()
    assert rows[0]["id"] == "1700000000000-0" and rows[1]["delivery_count"] == 3
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20,
                                               tzinfo=dt.timezone.utc)
    assert rows[0]["fields"] == [("payload", '{"n": 1}'), ("k", "v")]
    assert rows[0]["value"] == {"n": 1} and rows[1]["value"] is None
    assert "malformed JSON" in rows[1]["error"]


def test_binary_fields_keep_bytes_and_string_fields_escape_invalid_utf8():
    raw = [[b"1-0", [b"blob", b"\xff\x00\x01"]]]
    binary = BatchBuilder(output_schema(fields_binary=True), fields_binary=True, value_parser=None)
    got = binary.build("s", raw, None).column("fields").to_pylist()
    assert got == [[("blob", b"\xff\x00\x01")]]
    text = BatchBuilder(output_schema(), fields_binary=False, value_parser=None)
    value = text.build("s", raw, None).column("fields").to_pylist()[0][0][1]
    assert value == "\\xff\x00\x01"
    assert text.build("s", [], 1).num_rows == 0
    assert text.build("s", raw, None).column("delivery_count").null_count == 1
    assert isinstance(text.build("s", raw, 1), pa.RecordBatch)


def test_output_schema_columns():
    assert [f.name for f in output_schema().fields] == [
        "stream", "id", "timestamp", "fields", "delivery_count"]
    assert isinstance(output_schema(StructType().add("a", IntegerType())), StructType)


def test_invalid_utf8_field_names_are_escaped_and_stay_distinct():
    raw = [[b"1-0", [b"\xff", b"a", b"\xfe", b"b", b"ok", b"c"]]]
    for binary in (False, True):
        b = BatchBuilder(output_schema(fields_binary=binary), fields_binary=binary,
                         value_parser=None)
        names = [k for k, _ in b.build("s", raw, None).column("fields").to_pylist()[0]]
        assert names == ["\\xff", "\\xfe", "ok"]


def test_ids_beyond_spark_timestamps_keep_their_id_and_get_the_last_timestamp():
    top = 2**64 - 1
    raw = [[f"{top}-{top}".encode(), [b"a", b"1"]], [b"253402300800000-0", []], [b"5-1", []]]
    b = BatchBuilder(output_schema(), fields_binary=False, value_parser=None)
    batch = b.build("s", raw, None)
    assert batch.column("id").to_pylist() == [f"{top}-{top}", "253402300800000-0", "5-1"]
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
    stamps = batch.column("timestamp").to_pylist()
    assert stamps[:2] == [last, last]
    assert stamps[2] == dt.datetime(1970, 1, 1, 0, 0, 0, 5000, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("group", [None, "billing"])
def test_an_entry_that_cannot_become_a_row_is_named_with_the_way_past_for_its_read(group):
    """A bug's way out: a streaming read's error names the accept-loss command of its group;
    a batch read has no group (nothing to accept) and is told to read around the entry."""
    from spark_eventbus.errors import EntryDecodeError

    b = BatchBuilder(output_schema(), fields_binary=False, value_parser=None, group=group)
    good = [b"1-0", [b"k", b"v"]]
    broken = [b"2-0", 5]  # no field list: no reply of Redis looks like this
    with pytest.raises(EntryDecodeError) as err:
        b.build("orders", [good, broken], 1)
    text = str(err.value)
    assert "could not turn entry 2-0 of stream 'orders' into a row" in text
    if group is None:
        assert "accept-loss" not in text and "'startId' and 'endId'" in text
    else:
        assert "`eventbus group accept-loss --stream orders --group billing`" in text
