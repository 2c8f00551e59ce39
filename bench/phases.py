"""Where a group read over many streams spends its time, call by call, in one process
(``python bench/phases.py STREAMS [ENTRIES_PER_STREAM] [MAX_ENTRIES_PER_TRIGGER]``; defaults
100,000 streams, 2 entries each, 100,000 per trigger: the issue-58 figure's two batches).

The streaming reader's driver half is driven as Spark drives it under ``Trigger.AvailableNow``
(``initialOffset``, ``prepareForTriggerAvailableNow``, then per batch ``latestOffset``,
``reportLatestOffset``, ``partitions`` and every partition's ``read``, ``commit``; ``stop``),
without Spark, on a ``redis-server`` of its own. Per call: wall seconds, Redis commands
(``INFO commandstats``; script-internal calls count), Redis's CPU milliseconds (``INFO cpu``)
and the five commands that took most of Redis's time (a script's include the commands it
ran; ``PHASES_TOP=30`` in the environment lists more). The pre-claim thread runs while the
reads and the report do, as it does under Spark: its work shows in whichever call it
overlaps. docs/benchmarks.md, issue 58.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import spread, start_redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.integration.helpers import driver_reader  # noqa: E402

TOP = int(os.environ.get("PHASES_TOP", "5"))  # commands listed per call


def _stats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    return {k[len("cmdstat_"):] if k.startswith("cmdstat_") else k:
            (int(v["calls"]), int(v["usec"])) for k, v in r.info("commandstats").items()}


def _cpu_ms(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1000


def main() -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    args = [int(a) for a in sys.argv[1:4]]
    streams, each, budget = (args + [100_000, 2, 100_000][len(args):])[:3]
    proc, port = start_redis(Path(tempfile.mkdtemp(prefix="eventbus-phases-")))
    try:
        r = redis.Redis(port=port)
        names = [f"ph:{i}" for i in range(streams)]
        spread(r, names, streams * each)
        reader = driver_reader(f"redis://127.0.0.1:{port}/0", ",".join(names), "g",
                               consumer="c", maxEntriesPerTrigger=str(budget))
        last, cpu = _stats(r), _cpu_ms(r)
        total = [0.0, 0, 0.0]

        def call(what: str, job: Any, *a: Any) -> Any:
            nonlocal last, cpu
            began = time.perf_counter()
            out = job(*a)
            took = time.perf_counter() - began
            ms = _cpu_ms(r) - cpu
            now = _stats(r)
            diff = {k: (c - last.get(k, (0, 0))[0], u - last.get(k, (0, 0))[1])
                    for k, (c, u) in now.items() if k != "info"}
            diff = {k: v for k, v in diff.items() if v[0] > 0}
            last, cpu = _stats(r), _cpu_ms(r)
            calls = sum(c for c, _ in diff.values())
            top = sorted(diff.items(), key=lambda kv: -kv[1][1])[:TOP]
            print(f"{what:18s} {took:7.2f} s {calls:10,d} commands ({calls / streams:5.1f} per "
                  f"stream), Redis CPU {ms:7,.0f} ms: "
                  + ", ".join(f"{k} {c:,d}/{u / 1000:,.0f} ms" for k, (c, u) in top), flush=True)
            total[0] += took
            total[1] += calls
            total[2] += ms
            return out

        print(f"{streams:,} streams, {each} entries each, maxEntriesPerTrigger {budget:,}")
        start = call("initialOffset", reader.initialOffset)
        call("prepareAvailableNow", reader.prepareForTriggerAvailableNow)
        n = 0
        while True:
            end = call(f"latestOffset {n}", reader.latestOffset, start, ReadMaxRows(budget))
            call(f"report {n}", reader.reportLatestOffset)
            if end is start:
                break

            def read_all(start: dict = start, end: dict = end) -> int:
                return sum(b.num_rows for p in reader.partitions(start, end)
                           for b in reader.read(p))
            call(f"read {n}", read_all)
            call(f"commit {n}", reader.commit, end)
            start, n = end, n + 1
        call("stop", reader.stop)
        print(f"{'in all':18s} {total[0]:7.2f} s {total[1]:10,d} commands "
              f"({total[1] / streams:5.1f} per stream), Redis CPU {total[2]:7,.0f} ms")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
