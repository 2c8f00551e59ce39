"""RESP, the Redis wire format, for commands the connector encodes itself (pure, no I/O): the
sink's ``XADD``s (:mod:`.chunking`), its ``MULTI``/``EXEC`` transaction
(:mod:`.redisio.produce`) and the packed ``XACK``s of committed ranges (:mod:`.redisio.group`).
The one place these bytes are spelled out."""

from __future__ import annotations

from collections.abc import Sequence

# One bulk string, as a ``%`` template: (length, bytes).
BULK = b"$%d\r\n%b\r\n"
CRLF = b"\r\n"


def array_header(n: int) -> bytes:
    """The header of an array (a command) of ``n`` elements."""
    return b"*%d\r\n" % n


def bulk(value: bytes) -> bytes:
    """``value`` as one bulk string."""
    return BULK % (len(value), value)


def bulks(items: Sequence[bytes]) -> bytes:
    """``items`` as consecutive bulk strings (arguments of a pre-packed command)."""
    return b"".join([BULK % (len(i), i) for i in items])


def command(*args: bytes | str | int) -> bytes:
    """One command as RESP."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return array_header(len(parts)) + bulks(parts)
