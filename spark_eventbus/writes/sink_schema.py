"""The sink's schema rules (driver side, before any task runs): :func:`plan_encoding` checks a
DataFrame schema once and returns a picklable :class:`EncodingPlan` — per column, how its
values become entry fields (the kinds below). Which target stream each row goes to: the
``stream`` option, else a ``stream`` column (as Kafka's ``topic`` option overrides its column).

Mapping: a ``fields`` map column, when present, is the entry; otherwise every column except
``stream`` is a field. Strings are text, binary is raw bytes, numbers, booleans, dates and
timestamps are text (timestamps ISO-8601 in UTC with ``Z``; without time zone for
``timestamp_ntz``), structs, arrays, maps and variants are JSON. Executor side:
:mod:`.encoding` applies the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

from ..errors import ConfigError

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
    stream (neither a ``stream`` column nor the ``stream`` option). With the option, a
    ``stream`` column is left out (neither routes nor is written).
    """
    names = [f.name for f in schema.fields]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"the DataFrame has duplicate column names {dup}; each column becomes "
                          "an entry field, so rename or drop the duplicates.")
    by_name = {f.name: f for f in schema.fields}
    stream_col = by_name.get(STREAM_COLUMN) if stream_option is None else None
    if stream_col is not None and not isinstance(stream_col.dataType, T.StringType):
        raise ConfigError(
            f"column 'stream' has type {stream_col.dataType.simpleString()}; it names each row's "
            "target stream and must be a string (cast it, or rename the column if it is data).")
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
