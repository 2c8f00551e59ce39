"""RESP bulk strings for the two encodings that cannot go command by command through the
packer (:func:`.redisio.wire.pack`, hiredis's): the sink's ``XADD``s, built for a whole chunk
at once by Arrow kernels (:mod:`.chunking`: packing per row in Python costs ~4.8 µs a row, the
Arrow path 0.28 µs), and the IDs a claim returned, kept as bulk strings so that acking a
committed chunk is one ``XACK`` with no per-ID work (:mod:`.redisio.group`). Pure, no I/O."""

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
