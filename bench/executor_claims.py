"""Experiment (not part of ``make bench``): would claiming on the executors make the reader faster?

``python bench/executor_claims.py [--entries N] [--runs K]`` starts its own ``redis-server`` and,
in one driver, after a warm-up query of each, runs K times in turn into Spark's ``noop`` sink
(``Trigger.AvailableNow``, 100,000 per trigger, 2 partitions):

* ``eventbus`` — the reader as it is (the driver claims, the executors replay with ``XRANGE``);
* ``prototype`` — ``format("execclaim")`` below: each task claims its share itself
  (``XREADGROUP`` as consumer ``c-p<k>``, the next one sent before the current page is decoded)
  and records the IDs of each chunk for the driver's ``XACK`` at commit. No crash safety, no
  replay: what it measures is a ceiling for that design;
* ``floor`` — Spark's in-memory Python source (``floor.py``).

It prints each run and the medians. docs/rejected-experiments.md has the result.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

# Run as a script: this folder is on sys.path (bench, floor), and importing bench puts the
# repository there (spark_eventbus, tests).
import redis
from floor import register_floor

from bench import WARMUP, WARMUP_ENTRIES, _spark, bench_redis, produce, redis_cpu, source_df

PER_TRIGGER = 100_000
PARTITIONS = 2
CHUNK = 2_000


def register_prototype(spark: Any, url: str) -> None:
    """``format("execclaim")``: executors claim their share themselves (prototype)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from spark_eventbus.reads.decoding import output_schema

    class Share(InputPartition):
        def __init__(self, stream: str, group: str, seq: int, k: int, budget: int) -> None:
            self.stream, self.group, self.seq, self.k, self.budget = stream, group, seq, k, budget

    def record_key(group: str, seq: int, k: int) -> str:
        return f"execclaim:{group}:{seq}:{k}"

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            self.stream, self.group = options["stream"], options["group"]
            self._r: redis.Redis | None = None

        @property
        def r(self) -> redis.Redis:
            if self._r is None:
                self._r = redis.Redis.from_url(url)
                with contextlib.suppress(redis.ResponseError):  # the group exists
                    self._r.xgroup_create(self.stream, self.group, "0-0")
            return self._r

        def initialOffset(self) -> dict:
            return {"seq": 0}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(PER_TRIGGER)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            groups: Any = self.r.xinfo_groups(self.stream)
            lag = next(g["lag"] for g in groups if g["name"].decode() == self.group)
            return {"seq": start["seq"] + 1} if lag else start

        def partitions(self, start: dict, end: dict) -> list[Share]:
            return [Share(self.stream, self.group, end["seq"], k, PER_TRIGGER // PARTITIONS)
                    for k in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            from spark_eventbus.core.resp import bulks as resp_bulk
            from spark_eventbus.reads.partition_reader import _builder
            from spark_eventbus.reads.partitions import ReadSpec
            from spark_eventbus.redisio import ConnectionSpec, client

            assert isinstance(partition, Share)
            p = partition
            spec = ReadSpec(ConnectionSpec(url), None, None, False, "payload", None, True, "none")
            rc = client(spec.conn)
            build = _builder(spec)
            conn = rc.connection_pool.get_connection()
            left, key = p.budget, record_key(p.group, p.seq, p.k)
            try:
                ask = min(CHUNK, left)
                conn.send_command("XREADGROUP", "GROUP", p.group, f"c-p{p.k}", "COUNT", ask,
                                  "STREAMS", p.stream, ">")
                while True:
                    reply = conn.read_response()
                    entries = ((next(iter(reply.values())) if isinstance(reply, dict)
                                else reply[0][1]) if reply else [])
                    if not entries:
                        break
                    left -= len(entries)
                    conn.send_command("RPUSH", key, resp_bulk([e[0] for e in entries]))
                    conn.read_response()
                    more = left > 0 and len(entries) == ask
                    if more:
                        ask = min(CHUNK, left)
                        conn.send_command("XREADGROUP", "GROUP", p.group, f"c-p{p.k}", "COUNT",
                                          ask, "STREAMS", p.stream, ">")
                    yield build.build(p.stream, entries, 1)
                    if not more:
                        break
            finally:
                rc.connection_pool.release(conn)

        def commit(self, end: dict) -> None:
            from spark_eventbus.core.resp import bulks as resp_bulk

            head = resp_bulk([b"XACK", self.stream.encode(), self.group.encode()])
            for k in range(PARTITIONS):
                key = record_key(self.group, end["seq"], k)
                for packed in self.r.lrange(key, 0, -1):
                    n = packed.count(b"\r\n") // 2
                    conn = self.r.connection_pool.get_connection()
                    try:
                        conn.send_packed_command([b"*%d\r\n" % (n + 3) + head + packed])
                        conn.read_response()
                    finally:
                        self.r.connection_pool.release(conn)
                self.r.delete(key)

    schema = output_schema()

    class Prototype(DataSource):
        @classmethod
        def name(cls) -> str:
            return "execclaim"

        def schema(self) -> Any:
            return schema

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader(self.options)

    spark.dataSource.register(Prototype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with bench_redis("eventbus-execclaim-") as (port, work):
        url = f"redis://127.0.0.1:{port}/0"
        r = redis.Redis(port=port)
        stream = "bench:execclaim"
        produce(r, args.entries, stream)
        produce(r, WARMUP_ENTRIES, WARMUP)
        spark = _spark()
        register_floor(spark, PER_TRIGGER, PARTITIONS)
        register_prototype(spark, url)

        def run(source: str, name: str, group: str) -> tuple[float, int, float]:
            fmt = "execclaim" if source == "prototype" else source
            df = source_df(spark, fmt, url, name, group, PER_TRIGGER, PARTITIONS)
            cpu0, t0 = redis_cpu(r), time.perf_counter()
            q = (df.writeStream.format("noop")
                 .option("checkpointLocation", tempfile.mkdtemp(dir=work))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            seconds = time.perf_counter() - t0
            if q.exception() is not None:
                raise SystemExit(f"{source} failed: {q.exception()}")
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            return seconds, rows, (redis_cpu(r) - cpu0) / max(1, rows) * 1e6

        sources = ("eventbus", "prototype", "floor")
        for source in sources:
            run(source, WARMUP, f"warmup-{source}")
        times: dict[str, list[float]] = {s: [] for s in sources}
        for k in range(args.runs):
            for source in sources:
                seconds, rows, cpu = run(source, stream, f"{source}-{k}")
                assert rows == args.entries, (source, rows)
                times[source].append(seconds)
                print(f"{source:<9} {seconds:5.2f} s  {rows / seconds:>9,.0f} rows/s  Redis CPU "
                      f"{cpu:.2f} us/entry", flush=True)
        med = {s: statistics.median(v) for s, v in times.items()}
        print("medians: " + ", ".join(f"{s} {v:.2f} s" for s, v in med.items()))
        print(f"against the floor: eventbus {med['floor'] / med['eventbus']:.2f}, prototype "
              f"{med['floor'] / med['prototype']:.2f}")
        spark.stop()


if __name__ == "__main__":
    main()
