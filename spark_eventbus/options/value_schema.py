"""Option ``valueSchema``: a DDL string (``"order_id BIGINT, amount DOUBLE"``) or a Spark schema
as JSON (``StructType.json()``) → a :class:`StructType` of the types the decoder supports.
DDL is parsed here in pure Python because the data source's ``schema()`` runs in a Python
worker with no JVM to ask. Pure: runs on the driver (options) and the executors (decoder).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

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

from ..errors import ConfigError

_PRIMITIVES: dict[str, Callable[[], DataType]] = {
    "string": StringType, "varchar": StringType, "char": StringType,
    "int": IntegerType, "integer": IntegerType, "bigint": LongType, "long": LongType,
    "smallint": ShortType, "short": ShortType, "tinyint": ByteType, "byte": ByteType,
    "double": DoubleType, "float": FloatType, "real": FloatType,
    "boolean": BooleanType, "bool": BooleanType,
    "timestamp": TimestampType, "date": DateType, "binary": BinaryType,
}
_TOKEN = re.compile(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


class _DDL:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ValueError(f"unexpected text at {text[pos:pos + 12]!r}")
            self.tokens.append(m.group(1))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise ValueError(f"expected {expected or 'more'} but found {tok!r}")
        self.i += 1
        return tok

    def fields(self, closing: str | None) -> StructType:
        out = StructType()
        while True:
            name = self.take()
            name = name[1:-1] if name.startswith("`") else name
            if self.peek() == ":":
                self.take(":")
            out = out.add(name, self.type(), True)
            if self.peek() == ",":
                self.take(",")
                continue
            if self.peek() == closing:
                return out
            raise ValueError(f"expected ',' but found {self.peek()!r}")

    def type(self) -> DataType:
        word = self.take().lower()
        if word in ("struct",):
            self.take("<")
            inner = self.fields(">")
            self.take(">")
            return inner
        if word == "array":
            self.take("<")
            element = self.type()
            self.take(">")
            return ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return MapType(key, value, True)
        if word in ("decimal", "numeric", "dec"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            return DecimalType(precision, scale)
        if word in ("varchar", "char") and self.peek() == "(":
            self.take("(")
            self.take()
            self.take(")")
        if word not in _PRIMITIVES:
            raise ValueError(f"unsupported type {word!r}")
        return _PRIMITIVES[word]()


def parse_value_schema(text: str) -> StructType:
    """Parse option ``valueSchema`` (DDL or Spark JSON). Raises :class:`ConfigError`."""
    try:
        if text.strip().startswith("{"):
            parsed = StructType.fromJson(json.loads(text))
        else:
            ddl = _DDL(text)
            parsed = ddl.fields(None)
            if ddl.peek() is not None:
                raise ValueError(f"unexpected {ddl.peek()!r}")
        _check_supported(parsed)
        return parsed
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"option 'valueSchema' = {text!r} is invalid ({exc}); use DDL such as "
            "'order_id BIGINT, amount DOUBLE, tags ARRAY<STRING>' or StructType.json()."
        ) from None


def _check_supported(dtype: DataType) -> None:
    if isinstance(dtype, StructType):
        for f in dtype.fields:
            _check_supported(f.dataType)
    elif isinstance(dtype, ArrayType):
        _check_supported(dtype.elementType)
    elif isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType):
            raise ValueError("JSON object keys are strings: use MAP<STRING, ...>")
        _check_supported(dtype.valueType)
    elif not isinstance(dtype, (*tuple(type(t()) for t in _PRIMITIVES.values()), DecimalType)):
        raise ValueError(f"unsupported type {dtype.simpleString()}")
