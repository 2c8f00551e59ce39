"""The contents of large batches, kept in Redis and named by their offsets
(:meth:`.core.offsets.BatchOffset.describe`): one string per batch, in the slot of the batch's
first stream (:func:`.core.keys.batch_key`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.keys import BOOKKEEPING_TTL_MS
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .streams import text


def keep(spec: ConnectionSpec, key: str, body: str) -> None:
    """Keep a batch's packed contents under ``key`` (for :data:`.core.keys.BOOKKEEPING_TTL_MS`
    at most; the close of the batch after it deletes them)."""
    with redis_errors(f"keeping the contents of a batch ({key})", spec):
        client(spec).set(key, body, px=BOOKKEEPING_TTL_MS)


def read(spec: ConnectionSpec, key: str) -> str | None:
    """A batch's packed contents (None: gone)."""
    with redis_errors(f"reading the contents of a batch ({key})", spec):
        raw = client(spec).get(key)
    return None if raw is None else text(raw)


def drop(spec: ConnectionSpec, keys: Sequence[str]) -> None:
    """Batches closed: their contents are no longer needed."""
    if not keys:
        return
    with redis_errors("dropping the contents of closed batches", spec):
        r = client(spec)
        for key in keys:  # one slot each (a cluster refuses a DEL across slots)
            r.delete(key)
