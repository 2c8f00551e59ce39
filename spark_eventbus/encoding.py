"""Rows → Redis stream entries: the sink's encoding rules, pure and vectorised.

Driver side: :func:`plan_encoding` checks a DataFrame schema once, before any task runs, and
returns a picklable :class:`EncodingPlan`. Executor side: :func:`encode_batch` turns one Arrow
``RecordBatch`` into *runs* (consecutive rows of one target stream with the same field names)
and *rejects* (rows that cannot be written, with the rule they broke); :class:`Chunker` cuts
each stream's runs into chunks of a fixed number of rows, deterministically, so a retried task
writes exactly the same chunks (the unit of idempotency).

Mapping: a ``fields`` map column, when present, is the entry; otherwise every column except
``stream`` is a field. Strings are text, binary is raw bytes, numbers, booleans, dates and
timestamps are text (timestamps ISO-8601 in UTC with ``Z``; without time zone for
``timestamp_ntz``), structs, arrays, maps and variants are JSON. A null column is left out of
that entry (Redis has no null); an entry left with no field at all is rejected.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from .errors import ConfigError

STREAM_COLUMN = "stream"
FIELDS_COLUMN = "fields"

# How a column's values become field values (executor side, see _encode_column).
TEXT, BINARY, CAST, FLOAT, TIMESTAMP, TIMESTAMP_NTZ, JSON, VARIANT, NULL = (
    "text", "binary", "cast", "float", "timestamp", "timestamp_ntz", "json", "variant", "null")

_CAST_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType,
               T.DecimalType, T.DateType)
_UNSUPPORTED_FIX = ("cast it to a string or a number first (e.g. F.col(c).cast('string')), "
                    "or drop it")


@dataclass(frozen=True)
class ColumnPlan:
    name: str
    kind: str


@dataclass(frozen=True)
class EncodingPlan:
    """What the sink writes for a schema. Picklable (travels to the executors)."""

    columns: tuple[ColumnPlan, ...]  # the field columns (columns mode) ...
    fields_column: ColumnPlan | None  # ... or the ``fields`` map (its value kind)
    stream_column: bool

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _kind(dtype: T.DataType) -> str | None:
    """The encoding of a top-level column type; None when the sink cannot encode it."""
    if isinstance(dtype, T.StringType):
        return TEXT
    if isinstance(dtype, T.BinaryType):
        return BINARY
    if isinstance(dtype, T.FloatType | T.DoubleType):
        return FLOAT
    if isinstance(dtype, _CAST_TYPES):
        return CAST
    if isinstance(dtype, T.TimestampType):
        return TIMESTAMP
    if isinstance(dtype, T.TimestampNTZType):
        return TIMESTAMP_NTZ
    if isinstance(dtype, T.VariantType):
        return VARIANT
    if isinstance(dtype, T.NullType):
        return NULL
    if isinstance(dtype, T.StructType | T.ArrayType | T.MapType):
        return JSON if _json_supported(dtype) else None
    return None


def _json_supported(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.StructType):
        return all(_json_supported(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return _json_supported(dtype.elementType)
    if isinstance(dtype, T.MapType):
        return _json_supported(dtype.keyType) and _json_supported(dtype.valueType)
    return _kind(dtype) is not None


def plan_encoding(schema: T.StructType, *, stream_option: str | None) -> EncodingPlan:
    """Check ``schema`` against the sink's rules (driver side) and say how to encode it.

    Raises :class:`ConfigError` naming the column, its type and the fix: a column type the sink
    cannot encode (intervals, user-defined types), a ``stream`` column that is not a string, a
    ``fields`` column that is not a map with string keys, no field column at all, or no target
    stream (neither a ``stream`` column nor the ``stream`` option), or both at once.
    """
    names = [f.name for f in schema.fields]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"the DataFrame has duplicate column names {dup}; each column becomes "
                          "an entry field, so rename or drop the duplicates.")
    by_name = {f.name: f for f in schema.fields}
    stream_col = by_name.get(STREAM_COLUMN)
    if stream_col is not None and not isinstance(stream_col.dataType, T.StringType):
        raise ConfigError(
            f"column 'stream' has type {stream_col.dataType.simpleString()}; it names each row's "
            "target stream and must be a string (cast it, or rename the column if it is data).")
    if stream_col is not None and stream_option is not None:
        raise ConfigError(
            f"both a 'stream' column and option 'stream' = {stream_option!r} are given: drop the "
            "column (df.drop('stream')) to write every row to the option's stream, or remove the "
            "option to route each row by its column. (A DataFrame read with "
            "format('eventbus') has a 'stream' column naming the SOURCE stream.)")
    if stream_col is None and stream_option is None:
        raise ConfigError(
            "no target stream: set option 'stream' (e.g. .option('stream', 'enriched')) or add "
            "a string column named 'stream' to route each row.")

    fields_col = by_name.get(FIELDS_COLUMN)
    if fields_col is not None:
        dtype = fields_col.dataType
        value_kind = _kind(dtype.valueType) if isinstance(dtype, T.MapType) else None
        if (not isinstance(dtype, T.MapType) or not isinstance(dtype.keyType, T.StringType)
                or value_kind in (None, JSON, VARIANT, NULL)):
            raise ConfigError(
                f"column 'fields' has type {dtype.simpleString()}; when present it is the whole "
                "entry and must be a map of string keys to strings, binary, numbers, booleans, "
                "dates or timestamps (e.g. map<string,string>). Rename the column to write it "
                "as one JSON field instead.")
        return EncodingPlan((), ColumnPlan(FIELDS_COLUMN, value_kind), stream_col is not None)

    columns = []
    for f in schema.fields:
        if f.name == STREAM_COLUMN:
            continue
        kind = _kind(f.dataType)
        if kind is None:
            raise ConfigError(
                f"column {f.name!r} has type {f.dataType.simpleString()}, which the eventbus "
                f"sink cannot write as an entry field; {_UNSUPPORTED_FIX}.")
        if not f.name:
            raise ConfigError("a column has an empty name; entry field names must be non-empty.")
        columns.append(ColumnPlan(f.name, kind))
    if not columns:
        raise ConfigError("the DataFrame has no column to write besides 'stream'; an entry needs "
                          "at least one field.")
    return EncodingPlan(tuple(columns), None, stream_col is not None)


# -- executor side ------------------------------------------------------------------------------


@dataclass
class Run:
    """Consecutive rows bound for one stream with the same field names, column-major."""

    names: tuple[str, ...]
    columns: list[list[Any]]  # one list per name, ``rows`` long; values are str or bytes
    rows: int
    sizes: np.ndarray  # bytes of each row's entry (names + values), for chunk byte limits
    # The same values as Arrow string/binary arrays without nulls, when the encoder had them
    # (the XADDs are then encoded by Arrow kernels instead of per row).
    arrays: list[pa.Array] | None = None

    def split(self, at: int) -> tuple[Run, Run]:
        arrays = self.arrays
        return (Run(self.names, [c[:at] for c in self.columns], at, self.sizes[:at],
                    None if arrays is None else [a.slice(0, at) for a in arrays]),
                Run(self.names, [c[at:] for c in self.columns], self.rows - at,
                    self.sizes[at:], None if arrays is None else [a.slice(at) for a in arrays]))


@dataclass
class Reject:
    """A row that cannot be written: why, which column, and what of it could be encoded."""

    row: int  # position in the task's input (0-based)
    rule: str  # short name of the rule broken, for counts
    reason: str
    column: str | None
    stream: str | None
    fields: list[tuple[str, Any]] = field(default_factory=list)


@dataclass
class EncodedBatch:
    runs: list[tuple[str, Run]]  # (stream, run) in row order per stream
    rejects: list[Reject]
    rows: int


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)  # a JSON string keeps every digit
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _json_ready(arrow_type: pa.DataType, arrow_field: pa.Field | None = None
                ) -> Callable[[Any], Any]:
    """A function making one ``to_pylist`` value JSON-ready (maps → objects, variants → JSON)."""
    if arrow_field is not None and (arrow_field.metadata or {}).get(b"variant") == b"true":
        return _variant_value
    if pa.types.is_map(arrow_type):
        key_fn = _json_ready(arrow_type.key_type)
        val_fn = _json_ready(arrow_type.item_type, arrow_type.item_field)

        def map_fn(v: Any) -> Any:
            if v is None:
                return None
            return {_map_key(key_fn(k)): val_fn(x) for k, x in v}
        return map_fn
    if pa.types.is_struct(arrow_type):
        subs = [(arrow_type.field(i).name, _json_ready(arrow_type.field(i).type,
                                                       arrow_type.field(i)))
                for i in range(arrow_type.num_fields)]

        def struct_fn(v: Any) -> Any:
            if v is None:
                return None
            return {name: fn(v[name]) for name, fn in subs}
        return struct_fn
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        elem = _json_ready(arrow_type.value_type, arrow_type.value_field)

        def list_fn(v: Any) -> Any:
            return None if v is None else [elem(x) for x in v]
        return list_fn
    return _identity


def _identity(v: Any) -> Any:
    return v


def _map_key(k: Any) -> str:
    if isinstance(k, str):
        return k
    text = json.dumps(k, default=_json_default)
    return text[1:-1] if text.startswith('"') else text


def _variant_value(v: Any) -> Any:
    if v is None:
        return None
    from pyspark.sql.types import VariantVal

    return json.loads(VariantVal(v["value"], v["metadata"]).toJson())


def _pylist(arr: pa.Array) -> list[Any]:
    """``arr.to_pylist()``, except that a string array holding bytes that are not UTF-8 (Spark
    passes ``CAST(binary AS STRING)`` through unchecked) gives bytes instead of raising: Redis
    values are binary-safe, so such a value is written byte for byte."""
    try:
        return arr.to_pylist()
    except UnicodeDecodeError:
        return arr.view(pa.binary()).to_pylist()


def _invalid_utf8(arr: pa.Array) -> list[int]:
    """Positions of the values of string array ``arr`` that are not valid UTF-8."""
    try:
        arr.view(pa.binary()).cast(pa.string())
        return []
    except pa.ArrowInvalid:
        pass
    out = []
    for i, v in enumerate(arr.view(pa.binary()).to_pylist()):
        try:
            v is None or v.decode("utf-8")
        except UnicodeDecodeError:
            out.append(i)
    return out


def _nested_values(arr: pa.Array) -> tuple[list[Any], dict[int, str]]:
    """``to_pylist()`` of a nested column; a row holding a string that is not UTF-8 becomes
    None with a reason (JSON text cannot carry those bytes) instead of failing the batch."""
    try:
        return arr.to_pylist(), {}
    except UnicodeDecodeError:
        pass
    values: list[Any] = []
    bad: dict[int, str] = {}
    for i in range(len(arr)):
        try:
            values.append(arr[i].as_py())
        except UnicodeDecodeError as exc:
            values.append(None)
            bad[i] = ("unsupported value: a string inside is not valid UTF-8 "
                      f"({exc.reason} at byte {exc.start}; e.g. binary cast to STRING), "
                      "which JSON text cannot hold; cast it to BINARY (base64 in JSON) or "
                      "repair it with make_valid_utf8()")
    return values, bad


def _to_json(values: list[Any], ready: Callable[[Any], Any]
             ) -> tuple[list[str | None], dict[int, str]]:
    out: list[str | None] = []
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(json.dumps(ready(v), default=_json_default, allow_nan=False,
                                  ensure_ascii=False, separators=(",", ":")))
        except (ValueError, TypeError) as exc:
            out.append(None)
            bad[i] = f"unsupported value: not representable as JSON ({exc})"
    return out, bad


def _float_text(arr: pa.Array) -> pa.Array:
    # Arrow prints the shortest round-trip text; NaN/Infinity are spelled so that Java,
    # JavaScript and Python all parse them back.
    text = pc.cast(arr, pa.string())
    if arr.null_count == len(arr):
        return text
    text = pc.if_else(pc.is_nan(arr), pa.scalar("NaN"), text)
    text = pc.if_else(pc.equal(arr, float("inf")), pa.scalar("Infinity"), text)
    return pc.if_else(pc.equal(arr, float("-inf")), pa.scalar("-Infinity"), text)


def _encode_column(arr: pa.Array, kind: str, arrow_field: pa.Field | None = None
                   ) -> tuple[pa.Array, dict[int, str]]:
    """One column as an Arrow string/binary array (nulls stay null) and per-row failures."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if kind in (TEXT, BINARY):
        return arr, {}
    if kind == CAST:
        return pc.cast(arr, pa.string()), {}
    if kind == FLOAT:
        return _float_text(arr), {}
    if kind == TIMESTAMP:
        utc = pc.cast(arr, pa.timestamp(arr.type.unit, tz="UTC"))
        return pc.strftime(utc, format="%Y-%m-%dT%H:%M:%SZ"), {}
    if kind == TIMESTAMP_NTZ:
        return pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S"), {}
    if kind == NULL:
        return pa.nulls(len(arr), pa.string()), {}
    ready = _variant_value if kind == VARIANT else _json_ready(arr.type, arrow_field)
    values, unreadable = _nested_values(arr)
    out, bad = _to_json(values, ready)
    bad.update(unreadable)
    try:
        return pa.array(out, pa.string()), bad
    except UnicodeEncodeError:
        # A lone surrogate in a Python string (no Arrow input holds one, but a variant's
        # toJson() might): JSON spells it as a \udXXX escape, which is valid UTF-8 text.
        return pa.array([v if v is None or _utf8_ok(v) else
                         json.dumps(json.loads(v), ensure_ascii=True, separators=(",", ":"))
                         for v in out], pa.string()), bad


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value; 0 for nulls."""
    return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def encode_batch(plan: EncodingPlan, rb: pa.RecordBatch, *, default_stream: str | None,
                 max_payload_bytes: int, first_row: int = 0) -> EncodedBatch:
    """Encode one Arrow batch (executor side). ``first_row`` numbers rows for messages."""
    n = rb.num_rows
    rejects: dict[int, Reject] = {}
    if plan.stream_column:
        targets = rb.column(STREAM_COLUMN)
        bad_target = pc.fill_null(pc.equal(pc.binary_length(targets), 0), True)
        for i in np.flatnonzero(bad_target.to_numpy(zero_copy_only=False)).tolist():
            rejects[i] = Reject(first_row + i, "no target stream",
                                     "the 'stream' column is null or empty: "
                                     "no target stream", STREAM_COLUMN, None)
        not_text = _invalid_utf8(targets)
        stream_values: list[str | None] | None = (
            targets.to_pylist() if not not_text else
            [None if v is None else v.decode("utf-8", "replace")
             for v in targets.view(pa.binary()).to_pylist()])
        for i in not_text:
            assert stream_values is not None
            stream_values[i] = None
            rejects[i] = Reject(first_row + i, "no target stream",
                                "the 'stream' column is not valid UTF-8 text: no target "
                                "stream", STREAM_COLUMN, None)
    else:
        stream_values = None

    if plan.fields_column is not None:
        runs, more = _encode_fields_map(plan, rb, stream_values, default_stream,
                                        max_payload_bytes, first_row, rejects)
        return EncodedBatch(runs, more, n)

    encoded: list[pa.Array] = []
    sizes = np.zeros(n, dtype=np.int64)
    present = np.zeros((len(plan.columns), n), dtype=bool)
    for j, col in enumerate(plan.columns):
        idx = rb.schema.get_field_index(col.name)
        arr, bad = _encode_column(rb.column(idx), col.kind, rb.schema.field(idx))
        for i, reason in bad.items():
            rejects.setdefault(i, Reject(first_row + i, "unsupported value", reason, col.name,
                                         None))
        encoded.append(arr)
        valid = (np.ones(n, dtype=bool) if arr.null_count == 0
                 else arr.is_valid().to_numpy(zero_copy_only=False))
        present[j] = valid
        sizes += _lengths(arr) + valid * len(col.name.encode())
    for i in np.flatnonzero(sizes > max_payload_bytes).tolist():
        rejects.setdefault(i, Reject(
            first_row + i, "maxPayloadBytes",
            f"entry of {int(sizes[i]):,} bytes is over maxPayloadBytes={max_payload_bytes:,} "
            "(field names + values)", _largest(encoded, plan, i), None))
    empty = ~present.any(axis=0)
    for i in np.flatnonzero(empty).tolist():
        rejects.setdefault(i, Reject(first_row + i, "no fields", "every column is "
                                          "null: an entry needs at least one field", None, None))

    names = plan.field_names
    for i, rej in rejects.items():
        rej.stream = _target(stream_values, default_stream, i)
        rej.fields = [(names[j], _pylist(encoded[j].slice(i, 1))[0])
                      for j in range(len(names)) if present[j, i]]

    # Runs: rows with the same target and the same present columns, in row order per target.
    ok = np.ones(n, dtype=bool)
    if rejects:
        ok[list(rejects)] = False
    pattern = np.zeros(n, dtype=np.int64)
    if len(names) <= 62:
        for j in range(len(names)):
            pattern |= present[j].astype(np.int64) << j
    else:  # too many columns for a bit pattern: one run per row with nulls
        has_null = ~present.all(axis=0)
        pattern[has_null] = np.arange(1, int(has_null.sum()) + 1)
    runs = []
    for stream, rows in _route(stream_values, default_stream, ok):
        take = pa.array(rows) if len(rows) != n else None
        taken = [a if take is None else a.take(take) for a in encoded]
        values = [_pylist(a) for a in taken]
        pat, row_sizes = pattern[rows], sizes[rows]
        bounds = np.flatnonzero(np.diff(pat)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(rows)]
        for s, e in zip(starts, ends, strict=True):
            keep = [j for j in range(len(names)) if present[j, rows[s]]]
            runs.append((stream, Run(tuple(names[j] for j in keep),
                                     [values[j][s:e] for j in keep], e - s, row_sizes[s:e],
                                     [taken[j].slice(s, e - s) for j in keep])))
    return EncodedBatch(runs, sorted(rejects.values(), key=lambda r: r.row), n)


def _largest(encoded: list[pa.Array], plan: EncodingPlan, i: int) -> str:
    sizes = [len(v) if (v := _pylist(a.slice(i, 1))[0]) is not None else -1 for a in encoded]
    return plan.columns[int(np.argmax(sizes))].name


def _target(stream_values: list[str | None] | None, default: str | None, i: int) -> str | None:
    if stream_values is None:
        return default
    return stream_values[i] or None


def _route(stream_values: list[str | None] | None, default: str | None, ok: np.ndarray
           ) -> Iterator[tuple[str, np.ndarray]]:
    """(stream, row positions) for the rows to write, each stream's rows in input order."""
    rows = np.flatnonzero(ok)
    if stream_values is None:
        assert default is not None
        if len(rows):
            yield default, rows
        return
    groups: dict[str, list[int]] = {}
    for i in rows.tolist():
        groups.setdefault(stream_values[i] or "", []).append(i)
    for stream, idx in groups.items():
        yield stream, np.asarray(idx, dtype=np.int64)


def _encode_fields_map(plan: EncodingPlan, rb: pa.RecordBatch,
                       stream_values: list[str | None] | None, default_stream: str | None,
                       max_payload_bytes: int, first_row: int, rejects: dict[int, Reject]
                       ) -> tuple[list[tuple[str, Run]], list[Reject]]:
    """The ``fields`` map column: each row's map is its entry. Checks are vectorised; rows
    next to each other with the same target and the same field names make one run."""
    assert plan.fields_column is not None
    col = rb.column(FIELDS_COLUMN)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    values, _ = _encode_column(col.items, plan.fields_column.kind)
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lo, hi = offsets[:-1], offsets[1:]

    def per_row(item_values: np.ndarray) -> np.ndarray:  # per-item values summed per row
        cum = np.concatenate([[0], np.cumsum(item_values, dtype=np.int64)])
        return cum[hi] - cum[lo]

    key_lengths = _lengths(col.keys)
    sizes = per_row(key_lengths) + per_row(_lengths(values))
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    empty_key = per_row(key_lengths == 0) > 0
    null_value = per_row(values.is_null().to_numpy(zero_copy_only=False)) > 0
    bad = ~valid | (hi == lo) | empty_key | null_value | (sizes > max_payload_bytes)
    if rejects:
        bad[list(rejects)] = True
    bad_keys = _invalid_utf8(col.keys)
    keys = ([k.decode("utf-8", "backslashreplace") for k in col.keys.view(pa.binary()).to_pylist()]
            if bad_keys else col.keys.to_pylist())
    bad_name = None
    if bad_keys:
        item_bad = np.zeros(len(keys), dtype=np.int64)
        item_bad[bad_keys] = 1
        bad_name = per_row(item_bad) > 0
        bad |= bad_name
    vals = _pylist(values)
    starts, ends = lo.tolist(), hi.tolist()  # Python ints: the row loops below index with them

    for i in np.flatnonzero(bad).tolist():
        pairs = (list(zip(keys[starts[i]:ends[i]], vals[starts[i]:ends[i]], strict=True))
                 if valid[i] else [])
        if i not in rejects:
            if not valid[i]:
                rule, reason = "no fields", "the 'fields' map is null: an entry needs a field"
            elif not pairs:
                rule, reason = "no fields", "the 'fields' map is empty: an entry needs a field"
            elif bad_name is not None and bad_name[i]:
                rule, reason = ("field name not UTF-8", "the 'fields' map has a key that is not "
                                "valid UTF-8 text (shown with \\xNN escapes in dlq fields): "
                                "field names are text")
            elif empty_key[i]:
                rule, reason = ("empty field name", "the 'fields' map has an empty key: field "
                                                    "names must be non-empty")
            elif null_value[i]:
                name = next(k for k, v in pairs if v is None)
                rule, reason = "null field", f"fields[{name!r}] is null: Redis has no null value"
            else:
                rule, reason = "maxPayloadBytes", (
                    f"entry of {int(sizes[i]):,} bytes is over "
                    f"maxPayloadBytes={max_payload_bytes:,} (field names + values)")
            rejects[i] = Reject(first_row + i, rule, reason, FIELDS_COLUMN,
                                _target(stream_values, default_stream, i))
        rejects[i].fields = [(k, v) for k, v in pairs if k and v is not None]

    runs: list[tuple[str, Run]] = []

    def close(first: int, last: int, stream: str, names: tuple[str, ...]) -> None:
        k, a, b = len(names), starts[first], ends[last]  # rows first..last, items a..b
        runs.append((stream, Run(names, [vals[a + j:b:k] for j in range(k)], last - first + 1,
                                 sizes[first:last + 1],
                                 [values.take(np.arange(a + j, b, k)) for j in range(k)])))

    run_start = prev = -1
    run_stream = ""
    run_names: tuple[str, ...] = ()
    for i in np.flatnonzero(~bad).tolist():
        stream = _target(stream_values, default_stream, i)
        assert stream is not None
        names = tuple(keys[starts[i]:ends[i]])
        if i != prev + 1 or stream != run_stream or names != run_names:
            if run_start >= 0:
                close(run_start, prev, run_stream, run_names)
            run_start, run_stream, run_names = i, stream, names
        prev = i
    if run_start >= 0:
        close(run_start, prev, run_stream, run_names)
    return runs, sorted(rejects.values(), key=lambda r: r.row)


# -- chunking -----------------------------------------------------------------------------------


@dataclass
class WriteChunk:
    """``rows`` rows for ``stream``: the ``index``-th chunk of that stream in this task."""

    stream: str
    index: int
    runs: list[Run]
    rows: int


class Chunker:
    """Cuts each stream's rows into chunks of ``size`` rows and at most ``max_bytes`` bytes
    (a single larger row makes a chunk of its own); the last chunk of a stream is shorter.

    Chunk boundaries depend only on the sequence of rows per stream, never on how Spark sliced
    the input into Arrow batches, so a retried task recreates the same chunks.
    """

    def __init__(self, size: int, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self._pending: dict[str, list[Run]] = {}
        self._count: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._next: dict[str, int] = {}

    def add(self, stream: str, run: Run) -> Iterator[WriteChunk]:
        pending = self._pending.setdefault(stream, [])
        count, nbytes = self._count.get(stream, 0), self._bytes.get(stream, 0)
        while run.rows:
            cum = np.cumsum(run.sizes)
            fit = int(np.searchsorted(cum, self.max_bytes - nbytes, side="right"))
            take = min(run.rows, self.size - count, fit)
            if take == 0 and count:  # the next row would overflow the chunk's bytes
                yield self._emit(stream, pending, count)
                pending = self._pending[stream] = []
                count = nbytes = 0
                continue
            take = max(take, 1)  # a row larger than max_bytes travels alone
            head, run = run.split(take) if take < run.rows else (run, run.split(run.rows)[1])
            pending.append(head)
            count += take
            nbytes += int(cum[take - 1])
            if count == self.size or run.rows:
                yield self._emit(stream, pending, count)
                pending = self._pending[stream] = []
                count = nbytes = 0
        self._count[stream], self._bytes[stream] = count, nbytes

    def flush(self) -> Iterator[WriteChunk]:
        for stream, pending in self._pending.items():
            if pending:
                yield self._emit(stream, pending, self._count[stream])
        self._pending.clear()
        self._count.clear()
        self._bytes.clear()

    def _emit(self, stream: str, runs: list[Run], rows: int) -> WriteChunk:
        index = self._next.get(stream, 0)
        self._next[stream] = index + 1
        return WriteChunk(stream, index, list(runs), rows)


def chunk_args(chunk: WriteChunk) -> list[Any]:
    """The Lua script's entry arguments: per run ``K, m, name_1..name_K`` then ``m*K`` values,
    row-major. Slice assignment interleaves the columns at C speed."""
    args: list[Any] = []
    for run in chunk.runs:
        k = len(run.names)
        args += [k, run.rows, *run.names]
        flat: list[Any] = [None] * (k * run.rows)
        for j, col in enumerate(run.columns):
            flat[j::k] = col
        args += flat
    return args


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


def _as_bytes(column: list[Any]) -> list[bytes]:
    return [v if v.__class__ is bytes else str(v).encode() for v in column]


_CRLF = pa.scalar(b"\r\n", pa.binary())
_EMPTY = pa.scalar(b"", pa.binary())


def _arrow_xadds(fixed: bytes, names: tuple[str, ...], arrays: list[pa.Array]) -> bytes:
    """One ``XADD`` per row built by Arrow kernels: per field the name's bulk string, then
    ``$<length>``, CRLF, the value, CRLF; joined row-wise, the rows are back to back in the
    result's data buffer."""
    pieces: list[Any] = []
    before = fixed
    for name, arr in zip(names, arrays, strict=True):
        value = arr.cast(pa.binary())
        length = pc.cast(pc.binary_length(value), pa.string()).cast(pa.binary())
        pieces += [pa.scalar(before + _bulk(name.encode()) + b"$", pa.binary()), length, _CRLF,
                   value]
        before = b"\r\n"
    rows = pc.binary_join_element_wise(*pieces, _CRLF, _EMPTY)
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32)
    data = rows.buffers()[2]
    return data[int(offsets[rows.offset]):int(offsets[rows.offset + len(rows)])].to_pybytes()


def xadd_commands(chunk: WriteChunk) -> bytes:
    """The chunk's rows as ``XADD <stream> * <name> <value> ...`` commands in RESP, one per
    row, in order (what redis-py would send for each; the sink sends them in one
    ``MULTI``/``EXEC``). Runs that carry Arrow columns are encoded by Arrow kernels; the
    others (dead letters) with one ``%`` format per row, the fixed parts of a run's rows (the
    command, the stream, the field names) in the template once."""
    stream = chunk.stream.encode()
    out: list[bytes] = []
    for run in chunk.runs:
        k = len(run.names)
        fixed = b"*%d\r\n" % (3 + 2 * k) + _bulk(b"XADD") + _bulk(stream) + _bulk(b"*")
        if run.arrays is not None:
            out.append(_arrow_xadds(fixed, run.names, run.arrays))
            continue
        template = fixed.replace(b"%", b"%%") + b"".join(
            _bulk(name.encode()).replace(b"%", b"%%") + b"$%d\r\n%b\r\n" for name in run.names)
        flat: list[Any] = [None] * (2 * k * run.rows)
        for j, col in enumerate(run.columns):
            values = _as_bytes(col)
            flat[2 * j::2 * k] = [len(v) for v in values]
            flat[2 * j + 1::2 * k] = values
        if k == 1:
            out += [template % (flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        elif k == 2:
            out += [template % (flat[i], flat[i + 1], flat[i + 2], flat[i + 3])
                    for i in range(0, len(flat), 4)]
        else:
            step = 2 * k
            out += [template % tuple(flat[i:i + step]) for i in range(0, len(flat), step)]
    return b"".join(out)


def dead_letter_run(reject: Reject, extra: list[tuple[str, str]]) -> Run:
    """A rejected row as a one-row run for the dead-letter stream."""
    pairs = [*reject.fields, ("dlq.reason", reject.reason)]
    if reject.column is not None:
        pairs.append(("dlq.column", reject.column))
    if reject.stream is not None:
        pairs.append(("dlq.target.stream", reject.stream))
    pairs += extra
    size = sum(len(k.encode()) + len(v if isinstance(v, bytes) else str(v).encode())
               for k, v in pairs)
    return Run(tuple(k for k, _ in pairs), [[v] for _, v in pairs], 1,
               np.array([size], dtype=np.int64))


__all__ = [
    "Chunker",
    "EncodingPlan",
    "Reject",
    "Run",
    "WriteChunk",
    "chunk_args",
    "encode_batch",
    "plan_encoding",
]
