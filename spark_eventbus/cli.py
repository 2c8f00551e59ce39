"""The operator's command line: ``eventbus status``, ``eventbus dlq replay``,
``eventbus acl-rule`` and ``eventbus pyfiles``.

Also ``python -m spark_eventbus``. Errors print one line and exit non-zero: 2 for bad
arguments, 1 for Redis errors; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from . import pyfiles
from .acl import ROLES, rule
from .errors import EventBusError
from .options import check_tls, check_url
from .redisio import (
    ConnectionSpec,
    Redis,
    client,
    key_type,
    redis_errors,
    replay_page,
    stream_exists,
    text,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def status(r: Redis, stream: str, group: str | None, dlq: str) -> dict[str, Any]:
    """Per group: lag, pending, last delivered ID, consumers (idle ms, pending)."""
    if not stream_exists(r, stream):
        raise EventBusError(f"stream {stream!r} does not exist")
    info: Any = r.xinfo_stream(stream)
    groups = []
    for g in r.xinfo_groups(stream):
        name = text(g["name"])
        if group is not None and name != group:
            continue
        consumers = [{"name": text(c["name"]), "pending": int(c["pending"]),
                      "idle_ms": int(c["idle"])}
                     for c in r.xinfo_consumers(stream, name)]
        groups.append({"group": name, "lag": g.get("lag"), "pending": int(g["pending"]),
                       "last_delivered_id": text(g["last-delivered-id"]),
                       "consumers": consumers})
    if group is not None and not groups:
        raise EventBusError(f"stream {stream!r} has no consumer group {group!r}")
    dlq_len = r.xlen(dlq) if key_type(r, dlq) == "stream" else 0
    return {"stream": stream, "length": int(info["length"]),
            "last_generated_id": text(info["last-generated-id"]), "groups": groups,
            "dead_letter_stream": dlq, "dead_letter_length": int(dlq_len)}


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
    return "\n".join(lines)


def replay(spec: ConnectionSpec, source: str, target: str, limit: int | None
           ) -> dict[str, int]:
    """Move up to ``limit`` dead-lettered entries from ``source`` back to ``target``, exactly
    once per entry (one script per page, or marked steps across cluster slots)."""
    r = client(spec)
    for key in (source, target):
        stream_exists(r, key)
    moved = kept = 0
    cursor = "-"
    while limit is None or moved < limit:
        page = 500 if limit is None else min(500, limit - moved)
        m, k, cursor = replay_page(spec, source, target, page, cursor)
        moved, kept = moved + m, kept + k
        if m + k == 0:
            break
    return {"moved": moved, "kept_without_fields": kept}


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="eventbus", description="Operate spark-eventbus streams and groups.")
    ap.add_argument("--url", default="redis://localhost:6379/0", help="redis://host:port/db")
    ap.add_argument("--password", default=None, help="kept out of the URL")
    ap.add_argument("--tls-ca-cert", help="CA of the server's certificate (rediss://)")
    ap.add_argument("--tls-cert-file", help="client certificate (mutual TLS)")
    ap.add_argument("--tls-key-file", help="client key (mutual TLS)")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    st = sub.add_parser("status", help="lag, pending and consumers per group")
    st.add_argument("--stream", required=True)
    st.add_argument("--group")
    st.add_argument("--dlq", help="dead-letter stream (default: <stream>:dlq)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    dlq = sub.add_parser("dlq", help="dead-letter stream operations")
    dsub = dlq.add_subparsers(dest="action", required=True, parser_class=_Parser)
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
    pf = sub.add_parser("pyfiles", help="write a zip for spark-submit --py-files")
    pf.add_argument("out", help="the zip to write, e.g. eventbus-pyfiles.zip")
    pf.add_argument("--no-redis", action="store_true",
                    help="leave redis-py out (the cluster's Python has it)")
    args = ap.parse_args(argv)
    if args.command == "acl-rule":  # no server needed
        print(f"ACL SETUSER {args.user} on >{'<password>'} "
              + rule(args.role, args.stream, args.dlq, args.cluster))
        return 0
    if args.command == "pyfiles":
        names = pyfiles.build(Path(args.out), include_redis=not args.no_redis)
        print(f"wrote {args.out} ({len(names)} files): pass it to spark-submit with "
              f"--py-files {args.out}")
        return 0
    try:
        check_url(args.url, args.password, name="--url")
    except EventBusError as exc:
        ap.error(str(exc))
    if getattr(args, "limit", None) is not None and args.limit < 1:
        ap.error("--limit must be at least 1")
    try:
        check_tls({"url": args.url, "tls_ca_cert": args.tls_ca_cert,
                   "tls_cert_file": args.tls_cert_file, "tls_key_file": args.tls_key_file})
    except EventBusError as exc:
        ap.error(str(exc))
    spec = ConnectionSpec(args.url, args.password, args.tls_ca_cert, args.tls_cert_file,
                          args.tls_key_file)
    try:
        with redis_errors(f"running {args.command}", spec):
            return _run(args, spec)
    except EventBusError as exc:
        print(f"eventbus: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, spec: ConnectionSpec) -> int:
    if args.command == "status":
        dlq = args.dlq or f"{args.stream}:dlq"
        result = status(client(spec), args.stream, args.group, dlq)
        print(json.dumps(result, indent=2) if args.json else format_status(result))
        return 0
    moved = replay(spec, args.source, args.target, args.limit)
    print(f"moved {moved['moved']} entries from {args.source!r} to {args.target!r}"
          + (f"; kept {moved['kept_without_fields']} with no original field"
             if moved["kept_without_fields"] else ""))
    return 0
