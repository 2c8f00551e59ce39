"""How fast this machine is right now, printed beside a run's wall times (`.ci/run` does).

The suite's wall time on a shared 2-core VM swings by the hour: the same 48 integration tests
took 196-240 CPU seconds at one hour and 301-313 the next, with the hypervisor stealing 3-29 %
of the cores in 5-second windows (issue 59). A wall-clock figure without the machine's speed
beside it cannot tell a slower suite from a slower hour. This prints

* ``reference``: CPU milliseconds of a fixed pure-Python workload, best of five (lower is
  faster; compare runs by it);
* with ``--since FILE``: what the machine did since ``FILE`` was written by ``--mark FILE``
  (busy, idle and steal seconds of all cores, from ``/proc/stat``).

Usage: ``machine_speed.py [--mark FILE | --since FILE]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def reference_ms() -> float:
    """CPU time of a fixed workload (integer arithmetic, dict and list churn), best of five."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        table: dict[int, int] = {}
        for i in range(600_000):
            table[i % 997] = table.get(i % 997, 0) + i * i
        sorted(str(v) for v in table.values())
        best = min(best, time.process_time() - start)
    return best * 1000


def cpu_ticks() -> dict[str, int]:
    with open("/proc/stat", encoding="ascii") as stat:
        values = stat.readline().split()[1:1 + len(_FIELDS)]
    return dict(zip(_FIELDS, map(int, values), strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--mark", type=Path, help="write the CPU counters to this file")
    group.add_argument("--since", type=Path, help="report the CPU counters since --mark")
    args = ap.parse_args()
    line = f"machine speed: reference {reference_ms():.0f} ms of CPU (lower is faster)"
    if args.mark:
        args.mark.write_text(" ".join(map(str, cpu_ticks().values())))
    elif args.since and args.since.exists():
        before = dict(zip(_FIELDS, map(int, args.since.read_text().split()), strict=True))
        now = cpu_ticks()
        hz = os.sysconf("SC_CLK_TCK")
        spent = {k: (now[k] - before[k]) / hz for k in _FIELDS}
        busy = sum(spent[k] for k in ("user", "nice", "system", "irq", "softirq"))
        total = busy + spent["idle"] + spent["iowait"] + spent["steal"]
        line += (f"; since the mark: {busy:.0f} s busy, {spent['idle'] + spent['iowait']:.0f} s "
                 f"idle, {spent['steal']:.0f} s stolen by the host "
                 f"({100 * spent['steal'] / total if total else 0:.0f} %), all cores")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
