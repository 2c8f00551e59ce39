"""The reader's decoder: stream entries → Arrow record batches (executor side). The output
schema is :mod:`.schema`'s; option ``valueSchema`` is parsed in :mod:`..options.value_schema`."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from ..core.ids import MAX_TIMESTAMP_MS as _MAX_TIMESTAMP_MS
from ..errors import ConfigError, EntryDecodeError, printable
from ..options.value_schema import parse_value_schema as parse_value_schema  # (its old home)
from .schema import output_schema as output_schema  # (its old home)

log = logging.getLogger("spark_eventbus")

# ---------------------------------------------------------------------------------------------
# JSON value coercion (what Spark's from_json would accept, strictly typed)


class _Mismatch(ValueError):
    """A JSON value that does not fit valueSchema: where (``path``) and why. Containers fill
    in the array index or map key of ``path`` on the way up, only when a value fails."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path, self.detail = path, detail

    def locate(self, pattern: str, actual: str) -> _Mismatch:
        if self.path.startswith(pattern):
            self.path = actual + self.path[len(pattern):]
        return self

    def __str__(self) -> str:
        return f"{self.path or 'value'}: {self.detail}"


# A lone UTF-16 surrogate (U+D800..U+DFFF): Python's JSON parser returns one for a ``\\udXXX``
# escape without its pair (JavaScript's ``JSON.stringify`` of a string cut inside an emoji), but
# it is not a Unicode scalar value: no UTF-8 text, Arrow string or Spark string can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(v: str, path: str) -> str:
    """``v`` itself when it is valid Unicode; else a :class:`_Mismatch` naming the path."""
    if v.isascii():
        return v
    m = _SURROGATE.search(v)
    if m is None:
        return v
    raise _Mismatch(path, f"text holds a lone surrogate {printable(m.group())} at character "
                          f"{m.start()}, which is not valid Unicode (a UTF-16 pair cut in two, "
                          "e.g. by JavaScript's slice())")


def _fails(convert: Callable[[Any], Any], v: Any) -> bool:
    try:
        convert(v)
    except _Mismatch:
        return True
    return False


def _converter(dtype: DataType, path: str) -> Callable[[Any], Any]:
    def fail(v: Any) -> _Mismatch:
        return _Mismatch(path, f"expected {dtype.simpleString()}, "
                         f"got {type(v).__name__} {json.dumps(v)[:40]}")

    if isinstance(dtype, StructType):
        subs = [(f.name, _converter(f.dataType, f"{path}.{f.name}" if path else f.name))
                for f in dtype.fields]

        def conv_struct(v: Any) -> Any:
            if not isinstance(v, dict):
                raise fail(v)
            return {name: (None if v.get(name) is None else c(v[name])) for name, c in subs}
        return conv_struct
    if isinstance(dtype, ArrayType):
        elem = _converter(dtype.elementType, f"{path}[]")

        def conv_array(v: Any) -> Any:
            if not isinstance(v, list):
                raise fail(v)
            try:
                return [None if x is None else elem(x) for x in v]
            except _Mismatch as exc:
                i = next(i for i, x in enumerate(v) if x is not None and _fails(elem, x))
                raise exc.locate(f"{path}[]", f"{path}[{i}]") from None
        return conv_array
    if isinstance(dtype, MapType):
        val = _converter(dtype.valueType, f"{path}{{}}")

        def conv_map(v: Any) -> Any:
            if not isinstance(v, dict):
                raise fail(v)
            try:
                return [(_check_text(k, f"{path}{{}}"), None if x is None else val(x))
                        for k, x in v.items()]
            except _Mismatch as exc:
                k = next(k for k, x in v.items()
                         if _fails(lambda k: _check_text(k, ""), k)
                         or (x is not None and _fails(val, x)))
                raise exc.locate(f"{path}{{}}", f"{path}[{json.dumps(k)}]") from None
        return conv_map
    if isinstance(dtype, StringType):
        def conv_str(v: Any) -> Any:
            if isinstance(v, str):
                return _check_text(v, path)
            if isinstance(v, dict | list):
                return json.dumps(v, separators=(",", ":"))
            return json.dumps(v)
        return conv_str
    if isinstance(dtype, BooleanType):
        def conv_bool(v: Any) -> Any:
            if isinstance(v, bool):
                return v
            raise fail(v)
        return conv_bool
    if isinstance(dtype, ByteType | ShortType | IntegerType | LongType):
        bits = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}[type(dtype)]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

        def conv_int(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise fail(v)
            return v
        return conv_int
    if isinstance(dtype, DoubleType | FloatType):
        def conv_float(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise fail(v)
            try:
                return float(v)
            except OverflowError:  # an integer of hundreds of digits
                raise fail(v) from None
        return conv_float
    if isinstance(dtype, DecimalType):
        def conv_dec(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise fail(v)
            try:
                d = decimal.Decimal(str(v))
                if not d.is_finite():
                    raise fail(v)
                # quantize raises InvalidOperation past the context's 28 digits: the
                # context is made wide enough for any value that could fit the type.
                with decimal.localcontext() as ctx:
                    ctx.prec = max(ctx.prec, dtype.precision + 2)
                    if d.adjusted() >= dtype.precision - dtype.scale:
                        raise fail(v)
                    q = d.quantize(decimal.Decimal(1).scaleb(-dtype.scale))
            except decimal.DecimalException:
                raise fail(v) from None
            if len(q.as_tuple().digits) > dtype.precision:
                raise fail(v)
            return q
        return conv_dec
    if isinstance(dtype, TimestampType):
        def conv_ts(v: Any) -> Any:
            if not isinstance(v, str):
                raise fail(v)
            try:
                t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                raise fail(v) from None
            return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
        return conv_ts
    if isinstance(dtype, DateType):
        def conv_date(v: Any) -> Any:
            try:
                return dt.date.fromisoformat(v)
            except (TypeError, ValueError):
                raise fail(v) from None
        return conv_date
    if isinstance(dtype, BinaryType):
        def conv_bin(v: Any) -> Any:
            if not isinstance(v, str):
                raise fail(v)
            return _check_text(v, path).encode()
        return conv_bin
    raise ConfigError(f"valueSchema type {dtype.simpleString()} is not supported")


_BOM_OR_NUL = b"\x00\xef\xfe\xff"


class ValueParser:
    """Parses one field of each entry as JSON into the ``value`` struct; failures fill ``error``."""

    def __init__(self, value_field: str, value_schema: StructType) -> None:
        self.field = value_field.encode()
        self.name = printable(value_field)
        self.convert = _converter(value_schema, "")

    def parse(self, fields: dict[bytes, bytes]) -> tuple[Any, str | None]:
        """(value, None) or (None, why): never raises for any payload."""
        name = self.name
        raw = fields.get(self.field)
        if raw is None:
            return None, f"field '{name}' is missing"
        try:
            # Decoded strictly here, not by json.loads(bytes): that decodes with
            # 'surrogatepass' and so accepts CESU-8 surrogate bytes (ED A0 80..ED BF BF).
            # Only a BOM or a NUL in the first two bytes can mean UTF-16/32 (RFC 8259 §8.1).
            utf8 = raw[:1] not in _BOM_OR_NUL and raw[1:2] != b"\x00"
            doc = json.loads(raw.decode("utf-8" if utf8 else json.detect_encoding(raw)))
        except UnicodeDecodeError as exc:
            return None, (f"malformed JSON in field '{name}': not valid "
                          f"{exc.encoding.upper()} text ({exc.reason} at byte {exc.start})")
        except (ValueError, RecursionError) as exc:
            return None, f"malformed JSON in field '{name}': {printable(str(exc))}"
        try:
            return self.convert(doc), None
        except _Mismatch as exc:
            return None, (f"JSON in field '{name}' does not match valueSchema: "
                          f"{printable(str(exc))}")
        except Exception as exc:  # one entry's value must never fail its batch
            return None, (f"JSON in field '{name}' could not be converted to valueSchema: "
                          f"{type(exc).__name__}: {printable(str(exc))}")


# ---------------------------------------------------------------------------------------------
# Arrow batches


class BatchBuilder:
    """Turns raw ``[id, [k, v, k, v, ...]]`` entries into Arrow record batches of ``schema``."""

    def __init__(self, schema: StructType, *, fields_binary: bool,
                 value_parser: ValueParser | None, group: str | None = None) -> None:
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.group = group  # a streaming read's group (None: a batch read), for the errors
        self.fields_binary = fields_binary
        self.value_parser = value_parser
        self.value_type = (self.arrow_schema.field("value").type if value_parser else None)
        self.map_type = self.arrow_schema.field("fields").type

    def build(self, stream: str | Sequence[str], entries: Sequence[Sequence[Any]],
              delivery_counts: Sequence[int] | int | None) -> pa.RecordBatch:
        """``stream``: the stream of every entry, or one per entry (a batch of several
        streams); ``delivery_counts``: one per entry, one for all, or None (batch reads: no
        group).

        Vectorised: the raw reply becomes Arrow arrays in C (pyarrow), not row by row. No
        entry's content can make it raise (a payload that does not parse gets its ``error``);
        should anything else fail, the error names the stream and the entry to look at.
        """
        try:
            return self._build(stream, entries, delivery_counts)
        except Exception as exc:
            raise self._name_entry(stream, entries, delivery_counts, exc) from exc

    def _name_entry(self, streams: str | Sequence[str], entries: Sequence[Sequence[Any]],
                    delivery_counts: Sequence[int] | int | None, exc: Exception
                    ) -> EntryDecodeError:
        """The first entry that fails on its own (else the batch's ID range), as an error that
        says how to move past it."""
        culprit = f"{_text(entries[0][0])}..{_text(entries[-1][0])}" if entries else "?"
        stream = streams if isinstance(streams, str) else (streams[0] if streams else "?")
        for i, entry in enumerate(entries):
            counts = (delivery_counts if delivery_counts is None
                      or isinstance(delivery_counts, int) else [delivery_counts[i]])
            name = streams if isinstance(streams, str) else streams[i]
            try:
                self._build(name, [entry], counts)
            except Exception:  # looking for the entry that fails
                culprit, stream = _text(entry[0]), name
                break
        head = (f"could not turn entry {culprit} of stream {stream!r} into a row "
                f"({type(exc).__name__}: {printable(str(exc))}). This is a bug in "
                "spark-eventbus: please report it with the entry (redis-cli XRANGE <stream> "
                "<id> <id>). ")
        if self.group is None:  # a batch read: no group, nothing to accept
            return EntryDecodeError(
                head + "To read around it now, read the IDs before it and after it with "
                "options 'startId' and 'endId' (two reads).")
        return EntryDecodeError(
            head + "To move past it now: copy the entry aside (XRANGE, XADD to another "
            "stream), delete it (XDEL <stream> <id>), restart the query, and when it stops on "
            "that lost entry run `eventbus group accept-loss --stream "
            f"{shlex.quote(stream)} --group {shlex.quote(self.group)}` and restart again; the "
            "entry is then counted in lostEntries, acked and never delivered "
            "(docs/data-loss.md).")

    def _build(self, stream: str | Sequence[str], entries: Sequence[Sequence[Any]],
               delivery_counts: Sequence[int] | int | None) -> pa.RecordBatch:
        n = len(entries)
        ids = pa.array([e[0] for e in entries], pa.binary()).cast(pa.string())
        flat = pa.array([e[1] or [] for e in entries], pa.list_(pa.binary()))
        pairs = flat.flatten()
        idx = np.arange(0, len(pairs), 2, dtype=np.int64)
        keys = _to_utf8(pairs.take(pa.array(idx)))
        values = pairs.take(pa.array(idx + 1))
        if not self.fields_binary:
            values = _to_utf8(values)
        offsets = pc.divide(flat.offsets, 2).cast(pa.int32())
        maps = pa.MapArray.from_arrays(offsets, keys, values, type=self.map_type)
        # An ID's millisecond part is any 64-bit unsigned number; Spark's timestamps end at
        # 9999-12-31: later IDs get that last millisecond (``id`` keeps the exact value).
        ms = pc.min_element_wise(
            pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 0).cast(pa.uint64()),
            pa.scalar(_MAX_TIMESTAMP_MS, pa.uint64())).cast(pa.int64())
        if delivery_counts is None:
            counts = pa.nulls(n, pa.int32())
        elif isinstance(delivery_counts, int):
            counts = pa.array(np.full(n, delivery_counts, dtype=np.int32))
        else:
            counts = pa.array(delivery_counts, pa.int32())
        columns = [
            pa.array(np.full(n, stream, dtype=object) if isinstance(stream, str) else stream,
                     pa.string()),
            ids,
            ms.cast(pa.timestamp("ms")).cast(self.arrow_schema.field("timestamp").type),
            maps,
            counts,
        ]
        parser = self.value_parser
        if parser is not None:
            parsed: list[Any] = []
            errors: list[str | None] = []
            for _, fl in entries:
                fl = fl or []
                value, error = parser.parse(dict(zip(fl[0::2], fl[1::2], strict=False)))
                parsed.append(value)
                errors.append(error)
            columns.append(self._values(parsed, errors))
            columns.append(pa.array(errors, pa.string()))
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    def _values(self, parsed: list[Any], errors: list[str | None]) -> pa.Array:
        """The ``value`` column. Should Arrow refuse a converted value (the converters are
        meant to make that impossible), that entry alone gets NULL and the reason in
        ``errors``, instead of failing the batch on every retry."""
        try:
            return pa.array(parsed, self.value_type)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            log.debug("value column fell back to per-entry conversion: %s", exc)
        for i, value in enumerate(parsed):
            try:
                pa.array([value], self.value_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                parsed[i] = None
                errors[i] = (f"the parsed value could not become an Arrow "
                             f"{self.value_type}: {type(exc).__name__}: {printable(str(exc))}")
        return pa.array(parsed, self.value_type)


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)


def _to_utf8(arr: pa.Array) -> pa.Array:
    """Binary → string (field names; values unless fieldsType=binary). Invalid UTF-8 bytes
    become ``\\xNN`` escapes, so that two different names stay two names and no entry fails
    to decode (a failing entry would fail its batch on every retry)."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "backslashreplace")
                         for v in arr.to_pylist()], pa.string())
