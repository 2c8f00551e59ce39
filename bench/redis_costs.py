"""Redis's own CPU per entry for the commands a consumer-group read is made of, alone on an idle
``redis-server`` (``python bench/redis_costs.py [REDIS_SERVER_BINARY]``).

300,000 entries of ~200 B (``bench.py``'s), read in ``COUNT 2000`` calls: ``XREADGROUP``
(entries go into the pending-entry list), ``XREADGROUP … NOACK`` (they do not), ``XACK`` of
what the first read delivered, and ``XRANGE`` (the reader's replay). Each figure is
``INFO commandstats``' microseconds over the entries, two runs each. What it shows
(docs/benchmarks.md, issue 55): most of ``XREADGROUP``'s cost is the pending-entry list, which
any consumer that acks pays, so the reader's Redis CPU has a floor above the plain loop's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import produce, start_redis

ENTRIES = 300_000
COUNT = 2_000


def _usec_per_entry(r: redis.Redis, command: str) -> float:
    stats = r.info("commandstats").get(f"cmdstat_{command}", {})
    return float(stats.get("usec", 0)) / ENTRIES


def main() -> None:
    proc, port = start_redis(Path(tempfile.mkdtemp(prefix="eventbus-costs-")),
                             sys.argv[1] if len(sys.argv) > 1 else None)
    try:
        r = redis.Redis(port=port)
        produce(r, ENTRIES, "costs")
        print(f"redis-server {r.info('server')['redis_version']}: µs of Redis CPU per entry "
              f"({ENTRIES:,} entries of ~200 B, COUNT {COUNT:,})")
        for run in range(2):
            for label, extra in (("XREADGROUP >", []), ("XREADGROUP NOACK >", ["NOACK"])):
                group = f"g{run}{len(extra)}"
                r.xgroup_create("costs", group, "0")
                r.config_resetstat()
                while r.execute_command("XREADGROUP", "GROUP", group, "c", "COUNT", COUNT,
                                        *extra, "STREAMS", "costs", ">"):
                    pass
                read = _usec_per_entry(r, "xreadgroup")
                line = f"  {label:<20} {read:.2f}"
                if not extra:
                    ids = [p["message_id"] for p in
                           r.xpending_range("costs", group, "-", "+", ENTRIES)]
                    r.config_resetstat()
                    for i in range(0, len(ids), COUNT):
                        r.xack("costs", group, *ids[i:i + COUNT])
                    line += f"   then XACK {_usec_per_entry(r, 'xack'):.2f}"
                print(line)
            r.config_resetstat()
            after = "-"
            while page := r.xrange("costs", after, "+", count=COUNT):
                after = "(" + page[-1][0].decode()
            print(f"  {'XRANGE':<20} {_usec_per_entry(r, 'xrange'):.2f}")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
