"""One column of a sink's Arrow batch → entry field values (executor side, pure): text as is,
numbers and timestamps as text, nested values and variants as JSON, each as an Arrow
string/binary array with the rows that could not be encoded and why; and the byte size of each
value, which the chunker's byte limit and ``maxPayloadBytes`` count. The kinds are
:mod:`.sink_schema`'s.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .sink_schema import BINARY, CAST, FLOAT, NULL, TEXT, TIMESTAMP, TIMESTAMP_NTZ, VARIANT


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


def as_bytes(arr: pa.Array) -> pa.Array:
    """A string array's bytes, unchecked (a string → binary cast does not validate UTF-8);
    ``large_string`` gives ``large_binary``."""
    return arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())


def pylist(arr: pa.Array) -> list[Any]:
    """``arr.to_pylist()``, except that a string array holding bytes that are not UTF-8 (Spark
    passes ``CAST(binary AS STRING)`` through unchecked) gives bytes instead of raising: Redis
    values are binary-safe, so such a value is written byte for byte."""
    try:
        return arr.to_pylist()
    except UnicodeDecodeError:
        return as_bytes(arr).to_pylist()


def invalid_utf8(arr: pa.Array) -> list[int]:
    """Positions of the values of string array ``arr`` that are not valid UTF-8."""
    try:
        as_bytes(arr).cast(pa.string())
        return []
    except pa.ArrowInvalid:
        pass
    out = []
    for i, v in enumerate(as_bytes(arr).to_pylist()):
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


def encode_column(arr: pa.Array, kind: str, arrow_field: pa.Field | None = None
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


def lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value; 0 for nulls."""
    return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
