"""Rows → Redis stream entries (executor side): the sink's encoding, pure and vectorised.

:func:`encode_batch` turns one Arrow ``RecordBatch`` into *runs* (consecutive rows of one
target stream with the same field names, with each entry's size in bytes) and *rejects* (rows
that cannot be written, with the rule they broke), following the :class:`EncodingPlan` that
:func:`.sink_schema.plan_encoding` made on the driver. :mod:`.chunking` cuts the runs into the
chunks the sink writes.

A null column is left out of that entry (Redis has no null); an entry left with no field at
all is rejected.
"""


from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .field_values import as_bytes, encode_column, invalid_utf8, lengths, pylist
from .sink_schema import FIELDS_COLUMN, STREAM_COLUMN, EncodingPlan

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
        not_text = invalid_utf8(targets)
        stream_values: list[str | None] | None = (
            targets.to_pylist() if not not_text else
            [None if v is None else v.decode("utf-8", "replace")
             for v in as_bytes(targets).to_pylist()])
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
        arr, bad = encode_column(rb.column(idx), col.kind, rb.schema.field(idx))
        for i, reason in bad.items():
            rejects.setdefault(i, Reject(first_row + i, "unsupported value", reason, col.name,
                                         None))
        encoded.append(arr)
        valid = (np.ones(n, dtype=bool) if arr.null_count == 0
                 else arr.is_valid().to_numpy(zero_copy_only=False))
        present[j] = valid
        sizes += lengths(arr) + valid * len(col.name.encode())
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
        rej.fields = [(names[j], pylist(encoded[j].slice(i, 1))[0])
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
        values = [pylist(a) for a in taken]
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
    sizes = [len(v) if (v := pylist(a.slice(i, 1))[0]) is not None else -1 for a in encoded]
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
    values, _ = encode_column(col.items, plan.fields_column.kind)
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lo, hi = offsets[:-1], offsets[1:]

    def per_row(item_values: np.ndarray) -> np.ndarray:  # per-item values summed per row
        cum = np.concatenate([[0], np.cumsum(item_values, dtype=np.int64)])
        return cum[hi] - cum[lo]

    key_lengths = lengths(col.keys)
    sizes = per_row(key_lengths) + per_row(lengths(values))
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    empty_key = per_row(key_lengths == 0) > 0
    null_value = per_row(values.is_null().to_numpy(zero_copy_only=False)) > 0
    bad = ~valid | (hi == lo) | empty_key | null_value | (sizes > max_payload_bytes)
    if rejects:
        bad[list(rejects)] = True
    bad_keys = invalid_utf8(col.keys)
    keys = ([k.decode("utf-8", "backslashreplace") for k in as_bytes(col.keys).to_pylist()]
            if bad_keys else col.keys.to_pylist())
    bad_name = None
    if bad_keys:
        item_bad = np.zeros(len(keys), dtype=np.int64)
        item_bad[bad_keys] = 1
        bad_name = per_row(item_bad) > 0
        bad |= bad_name
    vals = pylist(values)
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
    "EncodedBatch",
    "Reject",
    "Run",
    "dead_letter_run",
    "encode_batch",
]
