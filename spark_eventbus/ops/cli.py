"""The operator's command line: ``eventbus status [--watch]``,
``group create|seek|accept-loss``, ``stream trim``, ``consumer forget``,
``dlq list|show|replay``, ``acl-rule`` and ``pyfiles``.

Also ``python -m spark_eventbus``. Errors print one line and exit non-zero: 2 for bad
arguments, 1 for Redis errors; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from ..core.connection import (
    DEFAULT_FAILOVER_TIMEOUT_MS,
    DEFAULT_URL,
    DEFAULT_WAIT_TIMEOUT_MS,
    PASSWORD_ENV,
    SENTINEL_PASSWORD_ENV,
    check_url,
)
from ..core.losses import RangeLoss, accept_command, listing
from ..errors import EventBusError
from ..options.parsing import connection_of
from ..options.table import OPTIONS
from ..options.values import starting_position
from ..redisio import discovery
from ..redisio.admin import Admin
from ..redisio.retention import TrimReport
from . import pyfiles
from .acl import ROLES, rule


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def format_status(st: dict[str, Any]) -> str:
    lines = [f"stream {st['stream']}: {st['length']} entries, last ID {st['last_generated_id']}",
             f"dead-letter stream {st['dead_letter_stream']}: {st['dead_letter_length']} entries"]
    if not st["groups"]:
        lines.append("no consumer groups")
    for g in st["groups"]:
        lag = "unknown" if g["lag"] is None else g["lag"]
        lines.append(f"group {g['group']}: lag {lag}, pending {g['pending']}, "
                     f"last delivered {g['last_delivered_id']}")
        if g["consumers"]:
            width = max(len(c["name"]) for c in g["consumers"])
            lines.append(f"  {'consumer':<{width}}  {'pending':>8}  {'idle':>10}")
            for c in g["consumers"]:
                idle = f"{c['idle_ms'] / 1000:.1f} s"
                lines.append(f"  {c['name']:<{width}}  {c['pending']:>8}  {idle:>10}")
        for rec in g.get("stopped_on_lost_entries", []):
            lines += _format_loss(st["stream"], g["group"], rec)
    return "\n".join(lines)


def _format_loss(stream: str, group: str, rec: dict[str, Any]) -> list[str]:
    """Lines of a batch a query stopped on (``LossRecord.to_json``)."""
    ranges = [RangeLoss(**r) for r in rec["ranges"]]
    failed = rec["failed_at_ms"]
    when = "" if failed is None else " since " + datetime.fromtimestamp(
        failed / 1000, timezone.utc).isoformat(timespec="seconds")
    head = (f"  STOPPED on lost entries{when}: batch {rec['batch']} of consumer "
            f"{rec['consumer']}: {rec['missing']} entries no longer in the stream, in "
            f"{len(ranges)} {'range' if len(ranges) == 1 else 'ranges'}: {listing(ranges)}")
    if rec["accepted"]:
        return [head, "    accepted: the query's next replay of the batch moves past them"]
    return [head, f"    to move past them once: {accept_command(stream, group, rec['consumer'])}"
                  " (docs/data-loss.md)"]


def format_trim(rep: TrimReport) -> str:
    if rep.keep_from is None:
        return (f"stream {rep.stream}: nothing trimmed: "
                + ("no consumer group reads it (a stream without groups is never trimmed)."
                   if rep.groups == 0 else "the groups moved while trimming; run it again."))
    verb = "would remove" if rep.dry_run else "removed"
    size = "" if rep.bytes < 0 else f" ({rep.bytes} bytes of field names and values)"
    return (f"stream {rep.stream}: {verb} {rep.entries} entries{size}, before {rep.keep_from}; "
            f"{rep.length} entries {'would ' if rep.dry_run else ''}remain. Group "
            f"{rep.held_by!r} holds the rest back: it still needs {rep.keep_from} (its oldest "
            "pending entry or the entry after its last-delivered-id)."
            + (" Removed with XTRIM … ACKED: the server checked every group too."
               if rep.acked else ""))


def _help(option: str, extra: str = "") -> str:
    """A connection flag's help: its option's one line from the option table (docs/options.md
    is made from the same), and what the CLI adds."""
    text = next(o.help for o in OPTIONS if o.name == option)
    return (text + (f" ({extra})" if extra else "")).replace("%", "%%").replace("`", "")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="eventbus", description="Operate spark-eventbus streams and groups.")
    ap.add_argument("--url", default=DEFAULT_URL, help=_help("url"))
    ap.add_argument("--password", default=None,
                    help=_help("password", f"default: ${PASSWORD_ENV}, so that it stays out of "
                               "the shell's history too"))
    ap.add_argument("--password-file", metavar="PATH", help=_help("passwordFile"))
    ap.add_argument("--username-file", metavar="PATH", help=_help("usernameFile"))
    ap.add_argument("--credential-provider", metavar="MODULE:CALLABLE",
                    help=_help("credentialProvider"))
    ap.add_argument("--tls-ca-cert", help=_help("tlsCaCert"))
    ap.add_argument("--tls-cert-file", help=_help("tlsCertFile"))
    ap.add_argument("--tls-key-file", help=_help("tlsSecretKeyFile"))
    ap.add_argument("--sentinels", default="", metavar="HOST:PORT,...",
                    help=_help("sentinels", "--url then gives only the scheme, database and "
                               "credentials"))
    ap.add_argument("--sentinel-master", help=_help("sentinelMaster"))
    ap.add_argument("--sentinel-username", help=_help("sentinelUsername"))
    ap.add_argument("--sentinel-password", default=os.environ.get(SENTINEL_PASSWORD_ENV) or None,
                    help=_help("sentinelPassword", f"default: ${SENTINEL_PASSWORD_ENV}"))
    ap.add_argument("--failover-timeout-ms", type=int, default=DEFAULT_FAILOVER_TIMEOUT_MS,
                    help=_help("failoverTimeoutMs", f"default {DEFAULT_FAILOVER_TIMEOUT_MS}"))
    ap.add_argument("--wait-replicas", type=int, default=0,
                    help=_help("waitReplicas", "dlq replay, group create/seek; default 0"))
    ap.add_argument("--wait-timeout-ms", type=int, default=DEFAULT_WAIT_TIMEOUT_MS,
                    help=_help("waitTimeoutMs", f"default {DEFAULT_WAIT_TIMEOUT_MS}"))
    ap.add_argument("--wait-aof", action="store_true", help=_help("waitAof"))
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    st = sub.add_parser("status", help="lag, pending and consumers per group")
    which = st.add_mutually_exclusive_group(required=True)
    which.add_argument("--stream")
    which.add_argument("--stream-pattern", metavar="GLOB",
                       help="every stream matching GLOB (SCAN MATCH, every master), as option "
                            "streamPattern discovers them")
    st.add_argument("--group")
    st.add_argument("--dlq", help="dead-letter stream (default: <stream>:dlq)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--offset", type=int, default=0, metavar="K",
                    help="with --stream-pattern: skip the first K matching streams (by name)")
    st.add_argument("--limit", type=int, metavar="N",
                    help="with --stream-pattern: show at most N streams (a page)")
    st.add_argument("--watch", type=float, metavar="SECONDS", nargs="?", const=2.0,
                    help="refresh every SECONDS (default 2) until Ctrl-C")
    grp = sub.add_parser("group", help="create a consumer group or move its position")
    gsub = grp.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action, what in (("create", "create the group (and the stream) at a position"),
                         ("seek", "move the group's position (XGROUP SETID)")):
        g = gsub.add_parser(action, help=what)
        g.add_argument("--stream", required=True)
        g.add_argument("--group", required=True)
        g.add_argument("--to", dest="position", default="latest" if action == "create" else None,
                       required=action == "seek",
                       help="latest, earliest, an ID (start after it) or a timestamp (epoch ms "
                            "or ISO-8601: start at the first entry at or after it)")
        g.add_argument("--json", action="store_true", help="machine-readable output")
        if action == "seek":
            g.add_argument("--force", action="store_true",
                           help="move it even while a query reads the group")
    al = gsub.add_parser("accept-loss", help="let the next replay of the batch a query stopped "
                                             "on move past the entries it found missing")
    al.add_argument("--stream", required=True)
    al.add_argument("--group", required=True)
    al.add_argument("--consumer", help="only this consumer's query (default: every consumer "
                                       "of the group with a loss recorded)")
    al.add_argument("--batch", type=int, help="only this batch number")
    al.add_argument("--json", action="store_true", help="machine-readable output")
    stm = sub.add_parser("stream", help="stream operations")
    ssub = stm.add_subparsers(dest="action", required=True, parser_class=_Parser)
    tr = ssub.add_parser("trim", help="remove the entries every consumer group has acked")
    tr.add_argument("--stream", required=True)
    tr.add_argument("--dry-run", action="store_true", help="count, remove nothing")
    tr.add_argument("--json", action="store_true", help="machine-readable output")
    con = sub.add_parser("consumer", help="consumer operations")
    csub = con.add_subparsers(dest="action", required=True, parser_class=_Parser)
    fg = csub.add_parser("forget", help="move a consumer's pending entries to another "
                                         "consumer, then delete it")
    fg.add_argument("name", help="the consumer to delete")
    fg.add_argument("--to", required=True, help="the consumer that takes its pending entries")
    fg.add_argument("--stream", required=True)
    fg.add_argument("--group", required=True)
    fg.add_argument("--json", action="store_true", help="machine-readable output")
    dlq = sub.add_parser("dlq", help="dead-letter stream operations")
    dsub = dlq.add_subparsers(dest="action", required=True, parser_class=_Parser)
    ls = dsub.add_parser("list", help="the dead letters with their dlq.* reasons")
    ls.add_argument("--dlq", required=True, help="the dead-letter stream")
    ls.add_argument("--count", type=int, default=20, help="how many, newest first")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    sh = dsub.add_parser("show", help="every field of one dead letter")
    sh.add_argument("id", help="its ID in the dead-letter stream")
    sh.add_argument("--dlq", required=True, help="the dead-letter stream")
    sh.add_argument("--json", action="store_true", help="machine-readable output")
    rp = dsub.add_parser("replay", help="move dead-lettered entries back to a stream")
    rp.add_argument("--from", dest="source", required=True, help="the dead-letter stream")
    rp.add_argument("--to", dest="target", required=True, help="the stream to move them to")
    rp.add_argument("--limit", type=int, help="move at most this many")
    ar = sub.add_parser("acl-rule", help="print the least-privilege ACL rule of a role")
    ar.add_argument("--role", required=True, choices=sorted(ROLES))
    ar.add_argument("--stream", required=True, action="append", help="repeat for several")
    ar.add_argument("--dlq", help="the dead-letter stream, if the role writes one")
    ar.add_argument("--user", default="<user>", help="user name in the printed command")
    ar.add_argument("--cluster", action="store_true", help="add what Redis Cluster needs")
    ar.add_argument("--wait-aof", action="store_true",
                    help="add what option waitAof needs (+waitaof: Redis >= 7.2, Valkey)")
    ar.add_argument("--xackdel", action="store_true",
                    help="add what option deleteAtAck deletes with (+xackdel: Redis >= 8.2)")
    ar.add_argument("--xdelex", action="store_true",
                    help="add what dlq replay deletes pending references with (+xdelex, role "
                         "cli: Redis >= 8.2)")
    pf = sub.add_parser("pyfiles", help="write a zip for spark-submit --py-files")
    pf.add_argument("out", help="the zip to write, e.g. eventbus-pyfiles.zip")
    pf.add_argument("--no-redis", action="store_true",
                    help="leave redis-py out (the cluster's Python has it)")
    args = ap.parse_args(argv)
    if args.command == "acl-rule":  # no server needed
        print(f"ACL SETUSER {args.user} on >{'<password>'} "
              + rule(args.role, args.stream, args.dlq, args.cluster, args.wait_aof,
                     args.xackdel, args.xdelex))
        return 0
    if args.command == "pyfiles":
        names = pyfiles.build(Path(args.out), include_redis=not args.no_redis)
        print(f"wrote {args.out} ({len(names)} files): pass it to spark-submit with "
              f"--py-files {args.out}")
        return 0
    if args.password is None and not (args.password_file or args.credential_provider):
        args.password = os.environ.get(PASSWORD_ENV) or None
    try:
        check_url(args.url, args.password, name="--url")
    except EventBusError as exc:
        ap.error(str(exc))
    for flag in ("limit", "count"):
        if getattr(args, flag, None) is not None and getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1")
    if getattr(args, "offset", 0) < 0:
        ap.error("--offset must be 0 or more")
    if getattr(args, "watch", None) is not None and args.watch <= 0:
        ap.error("--watch must be a positive number of seconds")
    if getattr(args, "position", None) is not None:
        try:
            args.position = starting_position(args.position, "--to")
        except EventBusError as exc:
            ap.error(str(exc).replace("option '--to'", "--to"))
    try:
        spec = connection_of(vars(args), style="flag")  # the flags are the options' fields
    except EventBusError as exc:
        ap.error(str(exc))
    try:
        return _run(args, Admin(spec))
    except EventBusError as exc:
        print(f"eventbus: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # status --watch ends with Ctrl-C
        return 0


def _sources(found: list[str], dlq: str | None) -> tuple[list[str], int]:
    """The streams a pattern matched, without the dead-letter streams of the others (the
    default ``<stream>:dlq``, shown in its stream's status): (sources, how many left out)."""
    names = set(found)
    sources = [s for s in found if not (dlq is None and s.endswith(":dlq")
                                        and s[:-len(":dlq")] in names)]
    return sources, len(found) - len(sources)


def _print(args: argparse.Namespace, result: Any, table: str) -> None:
    print(json.dumps(result, indent=2) if args.json else table)


def _table(rows: list[list[str]], header: list[str], right: frozenset[int] = frozenset()
           ) -> str:
    """Columns padded to their widest cell; numbers (``right``) aligned right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(header), *(line(r) for r in rows)])


def _run(args: argparse.Namespace, admin: Admin) -> int:
    if args.command == "status":
        while True:
            if args.stream_pattern is None:
                result: Any = admin.status(args.stream, args.group,
                                           args.dlq or f"{args.stream}:dlq")
                table = format_status(result)
            else:
                sources, dead = _sources(
                    discovery.discover(admin.spec, args.stream_pattern,
                                       [args.dlq] if args.dlq else []), args.dlq)
                page = sorted(sources)[args.offset:][:args.limit]
                result = [admin.status(s, args.group, args.dlq or f"{s}:dlq") for s in page]
                also = f" (and {dead} dead-letter streams, shown with theirs)" if dead else ""
                shown = "" if len(page) == len(sources) else \
                    f"; streams {args.offset + 1}-{args.offset + len(page)} by name"
                table = "\n\n".join([f"{len(sources)} streams match "
                                      f"{args.stream_pattern!r}{also}{shown}",
                                      *(format_status(x) for x in result)])
            if args.watch and not args.json and sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")  # clear the terminal
            _print(args, result, table)
            if not args.watch:
                return 0
            sys.stdout.flush()
            time.sleep(args.watch)
    if args.command == "group":
        return _group(args, admin)
    if args.command == "stream":
        report = admin.trim_stream(args.stream, args.dry_run)
        _print(args, report.to_json(), format_trim(report))
        return 0
    if args.command == "consumer":
        moved = admin.forget_consumer(args.stream, args.group, args.name, args.to)
        _print(args, {"consumer": args.name, "moved_to": args.to, "moved": moved},
               f"Moved {moved} pending entries from consumer {args.name!r} to {args.to!r} and "
               f"deleted {args.name!r}.")
        return 0
    return _dlq(args, admin)


def _group(args: argparse.Namespace, admin: Admin) -> int:
    if args.action == "accept-loss":
        accepted = admin.accept_loss(args.stream, args.group, args.consumer, args.batch)
        lines = [f"Accepted the loss of {rec.missing} entries of stream {args.stream!r} in "
                 f"batch {rec.seq} (consumer {rec.consumer!r}): {listing(rec.ranges)}."
                 for rec in accepted]
        lines.append("Restart the query: its replay of that batch moves past exactly these "
                     "entries (counted in lostEntries, acked, never delivered). Any other loss "
                     "still stops it.")
        _print(args, [rec.to_json() for rec in accepted], "\n".join(lines))
        return 0
    if args.action == "create":
        at = admin.create_group(args.stream, args.group, args.position)
        _print(args, {"stream": args.stream, "group": args.group, "after": at},
               f"Created group {args.group!r} on stream {args.stream!r}: it delivers the "
               f"entries after {at}.")
        return 0
    at, live = admin.seek_group(args.stream, args.group, args.position, args.force)
    note = ("" if not live else " A running query reads the group: it reads after the new "
            "position from its next batch on; batches it already logged are replayed as they "
            "were.")
    _print(args, {"stream": args.stream, "group": args.group, "after": at,
                  "live_consumers": [lease.consumer for lease in live]},
           f"Moved group {args.group!r} of stream {args.stream!r}: it delivers the entries "
           f"after {at} next. Entries already delivered stay pending with their consumers "
           f"(acked as usual, or moved with `eventbus consumer forget`).{note}")
    return 0


DLQ_COLUMNS = ("dlq.reason", "dlq.source.stream", "dlq.source.id", "dlq.delivery_count")


def _dlq(args: argparse.Namespace, admin: Admin) -> int:
    if args.action == "replay":
        moved = admin.replay_dead_letters(args.source, args.target, args.limit)
        print(f"Moved {moved['moved']} entries from {args.source!r} to {args.target!r}"
              + (f"; kept {moved['kept_without_fields']} with no original field."
                 if moved["kept_without_fields"] else ".")
              + (f"\nPending references: {moved['references']}." if moved["references"] else ""))
        return 0
    if args.action == "list":
        entries = admin.dead_letters(args.dlq, args.count)
        rows = [[e["id"], *(e.get(c, "") for c in DLQ_COLUMNS)] for e in entries]
        shown = [[*row[:1], row[1][:60], *row[2:]] for row in rows]
        _print(args, entries, _table(shown, ["id", "reason", "source stream", "source id",
                                             "deliveries"], frozenset({4}))
               if rows else f"{args.dlq!r} is empty.")
        return 0
    fields = admin.dead_letter_fields(args.dlq, args.id)
    _print(args, {"id": args.id, "fields": fields},
           _table([[k, v] for k, v in fields.items()], ["field", "value"]))
    return 0
