"""Stream IDs: the one place they are parsed, compared and stepped.

Redis stream IDs are ``<ms>-<seq>`` with two unsigned 64-bit integers. They compare as the
integer pair ``(ms, seq)``, never as strings ("9-0" < "10-0" is False as text).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from ..errors import ConfigError

_MAX = 2**64 - 1
# The ``timestamp`` column's largest value (9999-12-31T23:59:59.999Z, the end of Spark's
# range): an ID whose milliseconds are later shows this (decoding; pushdown's bounds).
MAX_TIMESTAMP_MS = 253_402_300_799_999


def is_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits: ``str.isdigit`` alone accepts '²' and other
    digits ``int`` refuses or reads otherwise. Every number the connector parses from text
    (IDs, options, ports, versions) is checked with this."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True, order=True)
class StreamId:
    """An immutable, ordered stream ID."""

    ms: int
    seq: int = 0

    MIN: ClassVar[StreamId]
    MAX: ClassVar[StreamId]

    def __post_init__(self) -> None:
        if not (0 <= self.ms <= _MAX and 0 <= self.seq <= _MAX):
            raise ValueError(f"stream ID parts out of range: {self.ms}-{self.seq}")

    @classmethod
    def parse(cls, text: str | bytes, *, what: str = "stream ID") -> StreamId:
        """Parse ``"ms-seq"`` or ``"ms"`` (seq 0). Raises :class:`ConfigError` naming ``what``."""
        if isinstance(text, bytes):
            text = text.decode("ascii", "replace")
        try:
            return _parsed(text)
        except ValueError:
            raise ConfigError(
                f"{what} {text!r} is not a stream ID; use '<milliseconds>-<sequence>', "
                "e.g. '1700000000000-0'."
            ) from None

    def next(self) -> StreamId:
        """The smallest ID greater than this one."""
        if self.seq < _MAX:
            return StreamId(self.ms, self.seq + 1)
        return StreamId(self.ms + 1, 0)

    def prev(self) -> StreamId:
        """The largest ID smaller than this one (``0-0`` stays ``0-0``)."""
        if self.seq > 0:
            return StreamId(self.ms, self.seq - 1)
        if self.ms > 0:
            return StreamId(self.ms - 1, _MAX)
        return self

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


StreamId.MIN = StreamId(0, 0)
StreamId.MAX = StreamId(_MAX, _MAX)


@lru_cache(maxsize=1 << 16)
def _parsed(text: str) -> StreamId:
    """:meth:`StreamId.parse` without the error text; cached (IDs are immutable, and a query
    over thousands of streams compares the same few IDs per stream again and again)."""
    ms_text, sep, seq_text = text.strip().partition("-")
    if not is_digits(ms_text) or (sep and not is_digits(seq_text)):
        raise ValueError(text)
    return StreamId(int(ms_text), int(seq_text) if sep else 0)
