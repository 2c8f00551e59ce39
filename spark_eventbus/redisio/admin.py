"""Operator actions on a group and its consumers (the CLI's ``group`` and ``consumer``
commands): create, seek, forget, accept-loss. Create, seek and forget refuse while a live query
holds a consumer lease of the group (``--force`` overrides seek), so that an operator cannot
pull a position or pending entries from under a running query by accident; accept-loss only
lets the next replay of the batch a query stopped on move past the entries recorded missing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import NoPermissionError

from ..core.keys import alive_key, lease_key
from ..core.losses import LossRecord
from ..errors import ConfigError, EventBusError
from .base import Redis
from .boundary import redis_errors
from .capabilities import capabilities_of, check_scripting
from .client import ConnectionSpec, client
from .credentials import check_credentials
from .deadletter import replay_page
from .group import before_first_entry, create_group_args, is_earliest, position_args, xgroup
from .losses import accept_losses, loss_records
from .probes import checked_lag
from .retention import TrimReport, trim_acked
from .streams import key_type, permitted, stream_exists, takes_acked_trim, text

_T = TypeVar("_T")


@dataclass(frozen=True)
class LiveLease:
    consumer: str
    run: str  # the checkpoint run of the query holding it
    expires_ms: int | None  # None: unknown (a heartbeat this user may not read)


def group_names(r: Redis, stream: str) -> list[str]:
    return [text(g["name"]) for g in r.xinfo_groups(stream)] if stream_exists(r, stream) else []


def consumers(r: Redis, stream: str, group: str) -> list[dict[str, Any]]:
    return [{"name": text(c["name"]), "pending": int(c["pending"]), "idle_ms": int(c["idle"])}
            for c in r.xinfo_consumers(stream, group)]


def live_leases(r: Redis, stream: str, group: str) -> list[LiveLease]:
    """The group's consumers a running query holds (its heartbeat is renewed every few
    seconds)."""
    names = {c["name"] for c in consumers(r, stream, group)} | {f"spark-{group}"}
    out = []
    for name in sorted(names):
        key = lease_key(stream, group, name)
        holder = r.get(key)
        if not holder:
            continue
        run, owner = [*text(holder).split(" "), ""][:2]
        # alive while its heartbeat is (lua/lease.lua); a user that may not read the
        # heartbeat key takes it as alive (seek refuses; --force)
        try:
            left = int(r.pttl(alive_key(owner)))
        except NoPermissionError:
            out.append(LiveLease(name, run, None))
            continue
        if left > 0:
            out.append(LiveLease(name, run, left))
    return out


def _require_group(r: Redis, stream: str, group: str) -> None:
    if group not in group_names(r, stream):
        raise EventBusError(f"stream {stream!r} has no consumer group {group!r}; create it with "
                            "`eventbus group create`.")


def _earliest(r: Redis, stream: str, position: str) -> tuple[str, int] | None:
    """Where ``earliest`` puts a group on ``stream`` (:func:`.group.before_first_entry`), when
    ``position`` asks for it."""
    return before_first_entry(r, stream) if is_earliest(position) else None


def create_group(r: Redis, stream: str, group: str, position: str) -> str:
    """Create the group (and the stream) at ``position``; returns the ID it starts after."""
    if group in group_names(r, stream):
        raise EventBusError(f"stream {stream!r} already has a consumer group {group!r}; use "
                            "`eventbus group seek` to move it.")
    args = create_group_args(stream, group, position, _earliest(r, stream, position))
    xgroup(r, args)
    at = str(args[4])
    return text(r.xinfo_stream(stream)["last-generated-id"]) if at == "$" else at


def seek_group(r: Redis, stream: str, group: str, position: str, force: bool
               ) -> tuple[str, list[LiveLease]]:
    """Move the group's position (``XGROUP SETID``); returns the new position and the live
    queries it was moved under (``force``)."""
    _require_group(r, stream, group)
    live = live_leases(r, stream, group)
    if live and not force:
        who = ", ".join(f"consumer {lease.consumer!r} (checkpoint run {lease.run})"
                        for lease in live)
        raise ConfigError(
            f"group {group!r} of stream {stream!r} is being read by a running query: {who}. "
            "Stop the query first, or pass --force: the query then reads after the new "
            "position from its next batch on (batches it has already logged are replayed "
            "unchanged).")
    at, *rest = position_args(position, _earliest(r, stream, position))
    xgroup(r, ["XGROUP", "SETID", stream, group, at, *rest])
    if at == "$":
        at = text(r.xinfo_stream(stream)["last-generated-id"])
    return at, live


def forget_consumer(r: Redis, stream: str, group: str, name: str, to: str,
                    page: int = 1000) -> int:
    """Move ``name``'s pending entries to consumer ``to`` (``XCLAIM … JUSTID``: their delivery
    counts stay), then delete ``name`` — never ``XGROUP DELCONSUMER`` with entries pending,
    which would drop them. Returns how many entries moved."""
    if name == to:
        raise ConfigError("--to must name another consumer than the one to forget.")
    _require_group(r, stream, group)
    if name not in {c["name"] for c in consumers(r, stream, group)}:
        raise EventBusError(f"group {group!r} of stream {stream!r} has no consumer {name!r}.")
    live = [lease for lease in live_leases(r, stream, group) if lease.consumer == name]
    if live:
        raise ConfigError(
            f"consumer {name!r} of group {group!r} on stream {stream!r} is in use by a running "
            f"query (checkpoint run {live[0].run}); stop that query first.")
    moved = 0
    while True:
        rows = r.xpending_range(stream, group, "-", "+", page, consumername=name)
        if not rows:
            break
        ids: list[Any] = [text(row["message_id"]) for row in rows]
        r.xclaim(stream, group, to, 0, ids, justid=True)
        moved += len(ids)
    left = int(r.xpending_range(stream, group, "-", "+", 1, consumername=name) != [])
    if left:  # pragma: no cover - something claimed as `name` meanwhile
        raise EventBusError(f"consumer {name!r} received entries while they were moved; "
                            "run the command again.")
    r.xgroup_delconsumer(stream, group, name)
    return moved


def _consumer_names(r: Redis, stream: str, group: str,
                    known: list[dict[str, Any]] | None = None) -> list[str]:
    """The group's consumers (``known``: as :func:`consumers` read them already), and the
    default name of a query's (``spark-<group>``)."""
    found = consumers(r, stream, group) if known is None else known
    return sorted({c["name"] for c in found} | {f"spark-{group}"})


def stopped_on_losses(r: Redis, stream: str, group: str,
                      known: list[dict[str, Any]] | None = None) -> list[LossRecord]:
    """Batches the group's queries stopped on because entries were missing at replay and have
    not moved past yet (accepted or not), per consumer (its loss record, README key layout)."""
    return [rec for name in _consumer_names(r, stream, group, known)
            for rec in loss_records(r, stream, group, name) if rec.stopped]


def accept_loss(r: Redis, stream: str, group: str, consumer: str | None, seq: int | None
                ) -> list[LossRecord]:
    """Let the next replay of each batch a query of the group stopped on (``consumer``'s only,
    batch ``seq`` only, when given) move past the entries recorded missing: counted in
    ``lostEntries``, acked, never delivered. One-shot: nothing else is accepted — not a range
    that loses more entries meanwhile, not another batch. Returns the records accepted."""
    _require_group(r, stream, group)
    names = [consumer] if consumer else _consumer_names(r, stream, group)
    accepted = [rec for name in names for rec in accept_losses(r, stream, group, name, seq)]
    if accepted:
        return accepted
    waiting = [rec for name in names for rec in loss_records(r, stream, group, name)
               if rec.stopped and (seq is None or rec.seq == seq)]
    if waiting:
        batches = ", ".join(f"batch {rec.seq} (consumer {rec.consumer!r})" for rec in waiting)
        raise EventBusError(f"the loss of {batches} on stream {stream!r} is already accepted; "
                            "restart the query to move past it.")
    which = f" consumer {consumer!r} of" if consumer else ""
    batch = f" in batch {seq}" if seq is not None else ""
    raise EventBusError(
        f"no query of{which} group {group!r} on stream {stream!r} is stopped on lost "
        f"entries{batch}: nothing to accept. `eventbus status --stream {stream} --group "
        f"{group}` shows the losses recorded (they are kept until the batch commits).")


def status(r: Redis, stream: str, group: str | None, dlq: str) -> dict[str, Any]:
    """Per group: lag (the reader's rule, :func:`.probes.checked_lag`), pending, last
    delivered ID, consumers (idle ms, pending), and the batches its queries stopped on because
    entries were missing at replay."""
    if not stream_exists(r, stream):
        raise EventBusError(f"stream {stream!r} does not exist")
    info: Any = r.xinfo_stream(stream)
    newest, oldest = (text(info[k][0]) if info.get(k) else None
                      for k in ("last-entry", "first-entry"))
    groups = []
    for g in r.xinfo_groups(stream):
        name = text(g["name"])
        if group is not None and name != group:
            continue
        members = consumers(r, stream, name)  # XINFO CONSUMERS once per group
        lag = checked_lag(g.get("lag"), g.get("entries-read"), text(g["last-delivered-id"]),
                          newest, oldest, int(info["length"]))
        groups.append({"group": name, "lag": lag, "pending": int(g["pending"]),
                       "last_delivered_id": text(g["last-delivered-id"]),
                       "consumers": members,
                       "stopped_on_lost_entries": [
                           rec.to_json() for rec in stopped_on_losses(r, stream, name,
                                                                      members)]})
    if group is not None and not groups:
        raise EventBusError(f"stream {stream!r} has no consumer group {group!r}")
    dlq_len = r.xlen(dlq) if key_type(r, dlq) == "stream" else 0
    return {"stream": stream, "length": int(info["length"]),
            "last_generated_id": text(info["last-generated-id"]), "groups": groups,
            "dead_letter_stream": dlq, "dead_letter_length": int(dlq_len)}


def dead_letters(r: Redis, dlq: str, count: int) -> list[dict[str, str]]:
    """The newest ``count`` entries of dead-letter stream ``dlq``, newest first, as text."""
    if not stream_exists(r, dlq):
        raise EventBusError(f"dead-letter stream {dlq!r} does not exist")
    newest: Any = r.xrevrange(dlq, count=count)
    return [{"id": text(i), **{text(k): text(v) for k, v in (f or {}).items()}}
            for i, f in newest]


def dead_letter_fields(r: Redis, dlq: str, entry_id: str) -> dict[str, str]:
    """Every field of one dead letter, as text."""
    if not stream_exists(r, dlq):
        raise EventBusError(f"dead-letter stream {dlq!r} does not exist")
    found: Any = r.xrange(dlq, entry_id, entry_id)
    if not found:
        raise EventBusError(f"dead-letter stream {dlq!r} has no entry {entry_id!r}")
    return {text(k): text(v) for k, v in found[0][1].items()}


def replay_dead_letters(spec: ConnectionSpec, source: str, target: str, limit: int | None
                        ) -> dict[str, Any]:
    """Move up to ``limit`` dead-lettered entries from ``source`` back to ``target``, exactly
    once per entry (the marked steps of :func:`.deadletter.replay_page`, page by page).
    Where ``source`` has consumer groups, says what became of their pending references to the
    moved entries (``references``: None when it has none)."""
    r = client(spec)
    for key in (source, target):
        stream_exists(r, key)
    delete_refs, references = _references(spec, r, source)
    moved = kept = 0
    cursor = "-"
    while limit is None or moved < limit:
        page = 500 if limit is None else min(500, limit - moved)
        m, k, cursor = replay_page(spec, source, target, page, cursor, delete_refs)
        moved, kept = moved + m, kept + k
        if m + k == 0:
            break
    return {"moved": moved, "kept_without_fields": kept, "references": references}


def _references(spec: ConnectionSpec, r: Redis, dlq: str) -> tuple[bool, str | None]:
    """Whether the replay deletes with ``XDELEX … DELREF`` (a server with XDELEX, a user who
    may run it: an ``XDELEX`` of ``0-0``, which no entry or group holds, tells), and what the
    report says of the references of groups reading ``dlq`` (None: no group reads it)."""
    groups = len(r.xinfo_groups(dlq))
    if not capabilities_of(spec, scripts=False).has_xdelex:
        return False, None if not groups else (
            f"kept: {groups} group(s) read {dlq!r} and keep pending references to the moved "
            "entries (XDEL; the server has no XDELEX … DELREF, Redis >= 8.2); they are "
            "dropped as XAUTOCLAIM or XCLAIM meets them")
    if not permitted(r, "XDELEX", dlq, "DELREF", "IDS", 1, "0-0"):
        return False, None if not groups else (
            f"kept: {groups} group(s) read {dlq!r} and keep pending references to the moved "
            "entries: the Redis user may not run XDELEX, so they were deleted with XDEL. Add "
            "+xdelex to its rule (`eventbus acl-rule --role cli --stream <stream> --dlq "
            f"{dlq} --xdelex`)")
    return True, None if not groups else (
        f"deleted: the moved entries left the pending lists of the {groups} group(s) reading "
        f"{dlq!r} too (XDELEX … DELREF)")


class Admin:
    """The operator's actions against one server (the CLI's), each translating redis-py's
    errors into :mod:`spark_eventbus.errors` here, naming what it was doing."""

    def __init__(self, spec: ConnectionSpec) -> None:
        self.spec = spec
        check_credentials(spec)  # a password file or provider that fails: say so at once

    def _call(self, doing: str, fn: Callable[..., _T], *args: Any) -> _T:
        with redis_errors(doing, self.spec):
            return fn(client(self.spec), *args)

    def status(self, stream: str, group: str | None, dlq: str) -> dict[str, Any]:
        return self._call("reading the status", status, stream, group, dlq)

    def create_group(self, stream: str, group: str, position: str) -> str:
        return self._call("running group create", create_group, stream, group, position)

    def seek_group(self, stream: str, group: str, position: str, force: bool
                   ) -> tuple[str, list[LiveLease]]:
        return self._call("running group seek", seek_group, stream, group, position, force)

    def _scripts(self, command: str, why: str) -> None:
        """Before a command that runs Lua scripts changes anything: refuse a server without
        scripting, naming the command (:func:`.capabilities.check_scripting`)."""
        check_scripting(self.spec, f"`eventbus {command}`", why, "cli")

    def accept_loss(self, stream: str, group: str, consumer: str | None, seq: int | None
                    ) -> list[LossRecord]:
        self._scripts("group accept-loss", "it marks the loss accepted with loss_accept.lua")
        return self._call("running group accept-loss", accept_loss, stream, group, consumer,
                          seq)

    def trim_stream(self, stream: str, dry_run: bool) -> TrimReport:
        if not dry_run:  # a dry run only reads
            self._scripts("stream trim", "it checks the groups' positions and trims in one "
                                         "script, trim.lua")
        with redis_errors("running stream trim", self.spec):
            r = client(self.spec)
            if not stream_exists(r, stream, "stream trim trims only streams."):
                raise EventBusError(
                    f"stream {stream!r} does not exist at {self.spec.display}: nothing to trim. "
                    "Check the name (`eventbus status --stream-pattern '<glob>'` lists the "
                    "streams a pattern matches).")
            return trim_acked(r, stream, dry_run, count=True,
                              acked=not dry_run and takes_acked_trim(r, stream))

    def forget_consumer(self, stream: str, group: str, name: str, to: str) -> int:
        return self._call("running consumer forget", forget_consumer, stream, group, name, to)

    def dead_letters(self, dlq: str, count: int) -> list[dict[str, str]]:
        return self._call("running dlq list", dead_letters, dlq, count)

    def dead_letter_fields(self, dlq: str, entry_id: str) -> dict[str, str]:
        return self._call("running dlq show", dead_letter_fields, dlq, entry_id)

    def replay_dead_letters(self, source: str, target: str, limit: int | None
                            ) -> dict[str, Any]:
        self._scripts("dlq replay", "each page is added back by dlq_replay_add.lua")
        with redis_errors("running dlq replay", self.spec):
            return replay_dead_letters(self.spec, source, target, limit)
