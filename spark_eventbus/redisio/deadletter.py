"""Moving entries between two streams exactly once: dead-lettering (source → dead-letter stream,
then XACK) and the CLI's replay (dead-letter stream → target, then XDEL, or XDELEX … DELREF
where the server has it).

One way for every layout — one node, one cluster slot, or two streams in different slots of a
Redis Cluster (where no script may touch both) — each move in three steps, each idempotent:

1. read the entries (still pending / still dead-lettered) byte for byte, in the source's slot;
2. add them to the destination with a marker of each source ID, in one script in the
   destination's slot (``dead_letter_add.lua``, ``dlq_replay_add.lua``) — an entry whose
   marker exists was added by an earlier attempt;
3. XACK (or XDEL) them in the source's slot, then drop their markers.

A retry after a crash between steps finds each entry either gone from the source (nothing to
do) or marked (step 2 skips it), so no entry is added twice and none is lost. Dead letters are
rare: a move costs a few round trips, not one per entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.keys import BOOKKEEPING_TTL_MS, dead_letter_marker_key, replay_marker_key
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .durability import Barrier, wait_for_writes
from .scripts import run_script
from .streams import text, xack, xrange
from .wire import pipeline, raise_first

# Markers live only between steps 2 and 3; the TTL removes those of a move that never resumed.
MARKER_TTL_MS = BOOKKEEPING_TTL_MS


def dead_letter(spec: ConnectionSpec, source: str, dlq: str, group: str,
                entries: Sequence[tuple[str, str, str]]) -> tuple[int, int]:
    """Move ``entries`` — (id, reason, delivery count or '' for the group's count) — of
    ``source`` to ``dlq`` with the ``dlq.*`` fields, and XACK them for ``group``. Entries no
    longer pending for the group were moved (or acked) already and are skipped.
    Returns (moved, skipped)."""
    r = client(spec)
    # XPENDING's extended form: [[id, consumer, idle ms, times delivered]], or [] when not
    pending = raise_first(pipeline(r, [("XPENDING", source, group, entry_id, entry_id, 1)
                                       for entry_id, _, _ in entries]))
    live = [(e, p[0]) for e, p in zip(entries, pending, strict=True) if p]
    if not live:
        return 0, len(entries)
    found_all = raise_first(pipeline(r, [("XRANGE", source, entry_id, entry_id)
                                         for (entry_id, _, _), _ in live]))
    marker = dead_letter_marker_key(dlq, source, group)
    args: list[Any] = [source, group, MARKER_TTL_MS]
    for ((entry_id, reason, deliveries), pel), found in zip(live, found_all, strict=True):
        fields = list(found[0][1]) if found else []  # deleted meanwhile: the dlq.* fields only
        args += [entry_id, reason, deliveries or str(int(pel[3])), len(fields), *fields]
    run_script(r, "dead_letter_add", [dlq, marker], args)
    # waitReplicas: the dead letters on the dlq's replicas before the source acks them (a
    # failover of the dlq's node after the ack would lose them).
    ids = [entry_id for (entry_id, _, _), _ in live]
    wait_for_writes(spec, [Barrier(marker, MARKER_TTL_MS, ("SMISMEMBER", marker, *ids),
                                   lambda found: all(int(x) == 1 for x in found))],
                    f"dead-lettering entries to {dlq!r}")
    xack(r, source, group, ids)
    r.srem(marker, *ids)  # after the XACK a retry skips them anyway (no longer pending)
    return len(live), len(entries) - len(live)


def replay_page(spec: ConnectionSpec, dlq: str, target: str, count: int, after: str,
                delete_refs: bool = False) -> tuple[int, int, str]:
    """Move up to ``count`` dead-lettered entries after ID ``after`` ('-': from the start) from
    ``dlq`` back to ``target``, without their ``dlq.*`` fields; entries with no original field
    are kept in ``dlq``. ``delete_refs`` (a server with ``XDELEX``): delete the moved entries
    with ``XDELEX … DELREF``, which also drops them from the pending lists of groups reading
    ``dlq``, instead of ``XDEL``, which leaves those references behind. Returns (moved, kept,
    last ID looked at)."""
    r = client(spec)
    marker = replay_marker_key(target, dlq)
    what = f"moving dead letters from {dlq!r} back to {target!r}"
    start = "-" if after == "-" else f"({after}"
    page = xrange(r, dlq, start, "+", count)
    if not page:
        return 0, 0, after
    args: list[Any] = [MARKER_TTL_MS]
    for entry_id, fields in page:
        args += [entry_id, len(fields), *fields]
    _, _, kept, kept_ids = run_script(r, "dlq_replay_add", [target, marker], args)
    keep = {text(i) for i in kept_ids}
    gone = [text(e[0]) for e in page if text(e[0]) not in keep]
    if gone:
        # waitReplicas: the copies (and their marks) are on the target's replicas before the
        # originals are deleted on another shard, or a failover there could lose both
        wait_for_writes(spec, [Barrier(marker, MARKER_TTL_MS, ("SMISMEMBER", marker, *gone),
                                       lambda found: all(int(x) == 1 for x in found))], what)
        if delete_refs:
            r.execute_command("XDELEX", dlq, "DELREF", "IDS", len(gone), *gone)
        else:
            r.xdel(dlq, *gone)
        r.srem(marker, *gone)
    return len(gone), int(kept), text(page[-1][0])


def dead_letter_entries(spec: ConnectionSpec, source: str, dlq: str, group: str,
                        entries: Sequence[tuple[str, str, str]]) -> tuple[int, int]:
    """:func:`dead_letter` for callers outside the layer: errors come out translated
    ("dead-lettering entries to <dlq>")."""
    with redis_errors(f"dead-lettering entries to {dlq!r}", spec):
        return dead_letter(spec, source, dlq, group, entries)
