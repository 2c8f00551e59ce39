"""Every Redis key spark-eventbus derives from a stream name: the one place they are built.

Rules (pure; unit-tested with tricky names in ``tests/unit/test_keys.py``):

* **Unique per stream and role.** A key is ``{<slot tag>}:eventbus:<role>:<part>:<part>…``
  where each part (stream, group, consumer, query, batch) is percent-escaped so that it holds
  no ``%``, ``:``, ``{`` or ``}``. Parts are therefore split back unambiguously at ``:``, and two
  different (role, parts) never give one key — whatever braces, colons, unicode or prefixes the
  names contain. The tag is *not* what makes a key unique (two streams sharing ``{acc}`` share
  the tag); the escaped whole name is.
* **In the stream's cluster slot.** The slot tag makes the key hash to the slot of its stream,
  so one Lua script may touch both on Redis Cluster: the stream's own hash tag when it has one,
  else the whole name when it holds no ``}``, else (a name such as ``a}b`` that Redis hashes
  whole but that cannot sit inside braces, or the empty name) a short tag searched to hash to
  the same slot.

Redis Cluster hashes a key by its *hash tag*: the text between the first ``{`` and the first
``}`` after it, when non-empty; otherwise the whole key. CRC16 (XMODEM) modulo 16384.
"""

from __future__ import annotations

import binascii
import re
from functools import lru_cache

# The lifetime of bookkeeping keys a query may abandon (claim plans, sink markers and their
# registry, dead-letter and replay markers): a safety net, each is deleted when no longer
# needed (docs/key-layout.md). The Lua scripts get it through `scripts.script_text`.
BOOKKEEPING_TTL_MS = 7 * 24 * 3600 * 1000

SLOTS = 16384
PREFIX = "eventbus"

# Roles of derived keys (the key-layout table, docs/key-layout.md, lists each).
PLAN = "plan"  # hash: batch seq -> claim plan JSON, per (stream, group, consumer)
LEASE = "lease"  # string: owner of a (stream, group, consumer), with a TTL
ALIVE = "alive"  # string: a streaming query (its driver) is alive, with a TTL
SINK_MARKERS = "sink"  # set: '<partition>:<chunk>' written, per (stream, query, batch, task)
SINK_REGISTRY = "sink-registry"  # hash: batch id -> marker keys of that batch, per query
SINK_SEAL = "sink-seal"  # string: the last batch no attempt may write any more, per (stream, query)
DLQ_MARKERS = "dlq"  # set: source IDs added to a dead-letter stream, not yet acked (cluster)
REPLAY_MARKERS = "replay"  # set: dead-letter IDs added back to a stream, not yet deleted
LOSSES = "loss"  # hash: batch seq -> what its replay found missing, per (stream, group, consumer)
BATCH = "batch"  # string: a large batch's contents its offset names, per (consumer, run, seq)

_ESCAPES = {"%": "%25", ":": "%3A", "{": "%7B", "}": "%7D"}
_ESCAPE_TABLE = str.maketrans(_ESCAPES)


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: the first non-empty ``{...}``, else the key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


def key_slot(key: str | bytes) -> int:
    """The cluster slot of ``key``, computed as Redis does: CRC16 (XMODEM) of its hash tag."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return binascii.crc_hqx(raw, 0) % SLOTS


@lru_cache(maxsize=4096)
def slot_tag(stream: str) -> str:
    """Text to put between braces so that a key lands in ``stream``'s slot (never holds ``}``)."""
    tag = hash_tag(stream)
    if tag and "}" not in tag:
        return tag
    # `stream` has no usable tag and holds a '}' (or is empty): Redis hashes the whole name,
    # which no brace pair can quote ('{}' is no tag). Search a short tag of the same slot
    # (~16k tries on average, C-speed CRC; cached).
    return _tag_for_slot(key_slot(stream))


@lru_cache(maxsize=1024)
def _tag_for_slot(slot: int) -> str:
    n = 0
    while key_slot(f"slot-{n}") != slot:
        n += 1
    return f"slot-{n}"


def escape(part: str) -> str:
    """``part`` with ``%``, ``:``, ``{`` and ``}`` percent-escaped (injective, readable)."""
    return part.translate(_ESCAPE_TABLE)


def derived_key(stream: str, role: str, *parts: str) -> str:
    """The key of ``role`` for ``stream`` (and ``parts``), in ``stream``'s slot."""
    body = ":".join(escape(p) for p in (stream, *parts))
    return f"{{{slot_tag(stream)}}}:{PREFIX}:{role}:{body}"


def plan_key(stream: str, group: str, consumer: str) -> str:
    """Hash of claim plans of one consumer on one stream (one field per batch seq)."""
    return derived_key(stream, PLAN, group, consumer)


def lease_key(stream: str, group: str, consumer: str) -> str:
    """String naming the live query that reads ``stream`` as (``group``, ``consumer``)."""
    return derived_key(stream, LEASE, group, consumer)


def consumer_keys(stream: str, group: str, consumer: str) -> tuple[str, str, str]:
    """:func:`plan_key`, :func:`lease_key` and :func:`loss_key` of one consumer at once: the
    slot tag and the escaped names made once for the three (a query over 100,000 streams makes
    them for each at start)."""
    head = f"{{{slot_tag(stream)}}}:{PREFIX}:"
    body = f"{escape(stream)}:{escape(group)}:{escape(consumer)}"
    return f"{head}{PLAN}:{body}", f"{head}{LEASE}:{body}", f"{head}{LOSSES}:{body}"


def batch_key(stream: str, group: str, consumer: str, run: str, seq: int) -> str:
    """String holding the packed contents of batch (``run``, ``seq``) of one consumer, in the
    slot of ``stream`` (the first stream of that batch), when its offset names it instead of
    listing it (:data:`.offsets.NAME_FROM`)."""
    return derived_key(stream, BATCH, group, consumer, run, str(seq))


def loss_key(stream: str, group: str, consumer: str) -> str:
    """Hash of entries the replay of a batch found missing (one field per batch seq), written by
    the executors, accepted by an operator, dropped when the batch commits."""
    return derived_key(stream, LOSSES, group, consumer)


def sink_marker_key(stream: str, query: str, batch: str, partition: int) -> str:
    """Set of chunks of (``query``, ``batch``, ``partition``) already written to ``stream``.
    Per partition: only attempts of one task touch it, so a sink transaction may WATCH it."""
    return derived_key(stream, SINK_MARKERS, query, batch, str(partition))


def sink_seal_key(stream: str, query: str) -> str:
    """String, in ``stream``'s slot: the highest batch of ``query`` whose markers are gone
    (pruned after a later batch committed, or the one-off write ended). A sink transaction
    ``WATCH``es it with the marker set, so that a late attempt of a task of such a batch — a
    failed attempt's Python worker still writing the input it had received, a speculative copy
    that lost — writes nothing."""
    return derived_key(stream, SINK_SEAL, query)


def sink_seal_of_marker(marker: str) -> tuple[str, int]:
    """The seal key and the batch of the marker key ``marker`` (:func:`sink_marker_key` of
    the same stream and query): what the driver sets before it deletes that marker."""
    head, batch, _partition = marker.rsplit(":", 2)
    close = head.index("}")  # a slot tag holds no '}'
    role = f":{PREFIX}:{SINK_MARKERS}:"
    if head[close + 1:close + 1 + len(role)] != role:
        raise ValueError(f"not a sink marker key: {marker!r}")
    return f"{head[:close + 1]}:{PREFIX}:{SINK_SEAL}:{head[close + 1 + len(role):]}", int(batch)


def dead_letter_marker_key(dlq: str, source: str, group: str) -> str:
    """Set, in the dead-letter stream's slot: entries of (``source``, ``group``) already added
    to ``dlq`` whose XACK in the source's slot may not have happened yet (every dead-letter
    move: :mod:`.redisio.deadletter`)."""
    return derived_key(dlq, DLQ_MARKERS, source, group)


def replay_marker_key(target: str, dlq: str) -> str:
    """Set, in ``target``'s slot: entries of ``dlq`` already added back to ``target`` whose
    XDEL from ``dlq`` may not have happened yet (every ``eventbus dlq replay`` page)."""
    return derived_key(target, REPLAY_MARKERS, dlq)


def alive_key(owner: str) -> str:
    """The heartbeat of query ``owner`` (one driver's run of a query): its consumer leases
    (``lua/lease.lua``) are alive while it is. Its own slot: only ever touched by single-key
    commands."""
    return f"{{{PREFIX}:{escape(owner)}}}:{PREFIX}:{ALIVE}"


def sink_registry_key(query: str) -> str:
    """Hash of one sink query: batch id -> JSON list of that batch's marker keys (to prune).
    Its own slot (the query's): it is only ever touched by single-key commands."""
    return f"{{{PREFIX}:{escape(query)}}}:{PREFIX}:{SINK_REGISTRY}"


def glob_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the Redis glob ``pattern`` as ``SCAN MATCH`` and ``KEYS`` read
    it (Redis's ``stringmatchlen``): ``*``, ``?``, ``[abc]``, ``[^abc]``, ``[a-z]`` and ``\\x``
    for a literal ``x`` — unlike :mod:`fnmatch`, which reads ``[^`` and ``\\`` otherwise."""
    return _glob_regex(pattern).fullmatch(name) is not None


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j, negate, items = i + 1, False, []
            if j < n and pattern[j] == "^":
                negate, j = True, j + 1
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\" and j + 1 < n:
                    items.append(re.escape(pattern[j + 1]))
                    j += 2
                elif j + 2 < n and pattern[j + 1] == "-" and pattern[j + 2] != "]":
                    lo, hi = sorted((pattern[j], pattern[j + 2]))
                    items.append(f"{re.escape(lo)}-{re.escape(hi)}")
                    j += 3
                else:
                    items.append(re.escape(pattern[j]))
                    j += 1
            # Redis: an unclosed class runs to the end of the pattern
            out.append(f"[{'^' if negate else ''}{''.join(items)}]" if items
                       else ("(?!)" if not negate else "."))
            i = j + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)
