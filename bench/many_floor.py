"""The floor under a group read over many streams: what plain redis-py takes to create a group per
stream, read every entry once and ack it, with none of the connector's work (no claim plans, no
leases, no replay, no Spark) — ``python bench/many_floor.py [STREAMS] [ENTRIES_PER_STREAM]``
(defaults 100,000 and 2: issue 58's figure).

On a ``redis-server`` of its own: ``XGROUP CREATE`` of every stream (one pipeline), ``XREADGROUP
… >`` over 1,000 streams per call, each stream's range read again by ID (``XRANGE``, pipelined:
a reader that replays a batch exactly reads each entry twice, once when it claims it and once
when a task reads the batch), then one ``XACK`` per stream (one pipeline); each step's wall time
and Redis's CPU. docs/benchmarks.md compares it with a one-stream query.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import spread, start_redis


def _cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main() -> None:
    args = [int(a) for a in sys.argv[1:3]]
    streams, each = (args + [100_000, 2][len(args):])[:2]
    proc, port = start_redis(Path(tempfile.mkdtemp(prefix="eventbus-floor-")))
    try:
        r = redis.Redis(port=port)
        names = [f"floor:{i}" for i in range(streams)]
        spread(r, names, streams * each)
        steps: list[tuple[str, float, float]] = []
        clock, cpu = time.perf_counter(), _cpu(r)

        def step(name: str) -> None:
            nonlocal clock, cpu
            now, used = time.perf_counter(), _cpu(r)
            steps.append((name, now - clock, used - cpu))
            clock, cpu = now, used

        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.xgroup_create(name, "g", "0")
        pipe.execute()
        step("groups")
        read: list[tuple[bytes, list[bytes]]] = []
        for k in range(0, streams, 1_000):
            reply = r.xreadgroup("g", "c", {n: ">" for n in names[k:k + 1_000]}, count=each)
            read += [(stream, [e[0] for e in entries]) for stream, entries in reply]
        step("reads")
        replayed = 0  # the replay an exact reader adds: each stream's range read by ID again
        for k in range(0, len(read), 10_000):
            pipe = r.pipeline(transaction=False)
            for stream, ids in read[k:k + 10_000]:
                pipe.xrange(stream, ids[0], ids[-1])
            replayed += sum(len(got) for got in pipe.execute())
        step("replay (XRANGE)")
        pipe = r.pipeline(transaction=False)
        for stream, ids in read:
            pipe.xack(stream, "g", *ids)
        acked = sum(pipe.execute())
        step("acks")
        entries = sum(len(ids) for _, ids in read)
        assert entries == acked == replayed == streams * each, (entries, acked, replayed)
        wall = sum(s[1] for s in steps)
        print(f"{streams:,} streams, {entries:,} entries read and acked by plain redis-py: "
              + ", ".join(f"{n} {w:.2f} s (Redis CPU {c:.2f} s)" for n, w, c in steps)
              + f"; in all {wall:.2f} s, {wall / streams * 1e6:.0f} us per stream")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
