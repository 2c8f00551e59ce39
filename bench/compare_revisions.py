"""Before/after of a change: the reader and the sink of several git revisions, interleaved.

``python bench/compare_revisions.py REV [REV ...] [--entries N] [--rounds K] [--parts reader,sink]``
(``make bench-compare BASE=<rev>``: BASE against the working tree, every part that guards speed:
reader, nogroup, sink, latency; docs/development.md says when a change needs it)

A refactoring must leave speed alone, and two ``make bench`` runs minutes apart differ by more
than most changes (machines are noisy), so this puts every revision through the same runs in
turn, on one ``redis-server``, against the same data:

* each revision is checked out into a temporary ``git worktree`` (``.`` = this working tree);
* each measurement is a fresh driver (``local[2]``) whose ``PYTHONPATH`` puts that revision's
  ``spark_eventbus`` first, on the driver and on Spark's Python workers (checked: the run fails
  if a worker imported another copy);
* ``reader``: a 20,000-entry warm-up query, then N entries from the earliest ID at 100,000 per
  trigger (``Trigger.AvailableNow`` into ``noop``), a new group per run; nothing may stay pending;
* ``nogroup``: the same read without a consumer group (positions in the checkpoint only), from
  the earliest ID at 100,000 per trigger; every entry must arrive (``noop`` counts them);
* ``sink``: a 20,000-row warm-up write, then ``df.write.format("eventbus")`` of N cached rows
  (``key`` + ~200-byte ``payload``); the stream must hold N entries after it;
* ``many:N`` (e.g. ``--parts many:1,many:100,many:1000``): the reader over N streams holding
  ``--many-entries`` entries in all (spread evenly), one ``Trigger.AvailableNow`` query with
  default options after the warm-up; nothing may stay pending. Also timed: a plain redis-py
  loop (one ``XREADGROUP`` over all N streams, ``COUNT 1000``, then ``XACK``) on the same data;
* ``manyng:N``: the same N streams read without a consumer group (one ``Trigger.AvailableNow``
  query, default options); every entry must arrive;
* ``floor``: Spark's floor (``bench/floor.py``: an in-memory Python source with the reader's
  schema) for as many rows as the reader's stream, 100,000 per trigger; with it the summary
  gives each reader against the floor of the same round;
* ``cpu:read``, ``cpu:claim``, ``cpu:write`` (:func:`measure_cpu`): the connector's own code on
  one path, in-process without Spark — CPU per entry of an executor's replay, of the driver's
  claims, of a sink task — steadier than any query's wall time, for a change to that path;
* ``latency``: eventbus → eventbus (default trigger, ``local[2]``) while a thread of the same
  driver adds 5,000 entries/s for 15 s; the figure is the median latency (target entry's ID time
  minus its source entry's, both Redis's clock) from 5 s after the producer started, in ms
  (``make bench``'s latency part, shorter);
* K rounds of (each part at each revision), the revisions' order rotated each round (in a pair
  of runs, the later one tends to be slower); it prints each run and the median per revision.

Besides the wall time, each measured run records CPU: ``redis`` = redis-server's CPU
(``INFO cpu``) and ``spark`` = the driver's whole process tree (the Python driver, its JVM,
Spark's Python workers: ``/proc``) over the measured query or write, in µs per entry, and that
tree split into the JVM's own CPU and the Python processes' (``jvm``, ``python``). CPU is
steadier than wall time on a shared machine and says who pays. Then, for each revision after the
first (the base), each part's ratio against the base: the median of the per-round ratios (runs
of the same round are minutes apart at most) with their range — the spread — and a verdict:
``faster`` or ``SLOWER`` only when every round's ratio is on that side of 1.00 and their median
beyond the noise (the ``floor`` part's own stray between revisions, which run the same code there;
at least 5 %), else ``within spread``. Use an even number of rounds with two revisions: the
order rotates, and the later run of a pair tends to be the slower.

Revisions must accept the options used here (``stream``, ``group``, ``consumer``,
``startingPosition``, ``maxEntriesPerTrigger``; the sink's ``stream``), which every revision
since the first sink does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 20_000
PER_TRIGGER = 100_000


def _tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process and every process below it, with the
    children each has waited for, from ``/proc`` (empty where there is none): ``jvm`` = the
    JVM's own; ``python`` = the rest — this driver, Spark's Python workers (the tasks) and its
    streaming source runner (the source's driver side: Spark starts one per query and waits
    for it when the query ends, so the JVM's waited-for children count here)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    own: dict[int, float] = {}
    waited: dict[int, float] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        own[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        waited[pid] = (int(fields[13]) + int(fields[14])) / tick  # cutime + cstime
    mine = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    out = {"jvm": 0.0, "python": 0.0}
    for pid in mine:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                java = b"java" in f.read().split(b"\0", 1)[0]
        except OSError:
            java = False
        out["jvm" if java else "python"] += own.get(pid, 0.0)
        out["python"] += waited.get(pid, 0.0)
    return out


def _redis_cpu(url: str) -> float:
    import redis

    info = redis.Redis.from_url(url).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _calls(url: str) -> dict[str, int]:
    """Redis's calls so far per command (``INFO commandstats``)."""
    import redis

    stats = redis.Redis.from_url(url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def revision_module(*names: str) -> Any:
    """The first of ``spark_eventbus.<name>`` the measured revision has (a module's path may
    differ between the two revisions compared)."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(f"spark_eventbus.{name}")
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"none of spark_eventbus.{{{', '.join(names)}}}")


def measure_cpu(part: str, url: str, tag: str, rows_file: str) -> dict[str, object]:
    """A ``cpu:*`` part: one path of the connector's own code, in this process, no Spark: its
    CPU seconds (``time.process_time``, the best of three), which move far less than a query's
    wall time on a shared machine. ``cpu:read``: an executor's replay of the whole ``cmp:main``
    (``XRANGE`` pages decoded into Arrow); ``cpu:claim``: the driver's claims of it
    (``XREADGROUP COUNT 2000``, the IDs kept for the acks); ``cpu:write``: a sink task's
    ``write_partition`` of the parquet rows (10,000-row Arrow batches, idempotent)."""
    import gc

    import pyarrow.parquet as pq
    import redis

    import spark_eventbus
    from spark_eventbus.redisio.group import ConsumerOps
    from spark_eventbus.redisio.replay import StreamReplay
    from spark_eventbus.redisio.streams import read_entries
    from spark_eventbus.redisio.wire import pipeline
    from spark_eventbus.source import EventBusDataSource

    # the revision's own modules: in rooms since issue 56, at the package's top before
    ConnectionSpec = revision_module("core.connection", "connection").ConnectionSpec
    reader = revision_module("reads.partition_reader", "partition_reader")
    READ_PAGE, _builder = reader.READ_PAGE, reader._builder
    ReadSpec = revision_module("reads.partitions", "partitions").ReadSpec
    write_partition = revision_module("writes.sink", "sink").write_partition

    spec = ConnectionSpec(url)
    batches = pq.read_table(rows_file).to_batches(max_chunksize=10_000)
    gc.collect()
    gc.freeze()  # as the connector does in a Spark worker (worker_gc.settle)

    def read() -> None:
        build = _builder(ReadSpec(conn=spec, group="g", consumer="c", fields_binary=False,
                                  value_field="payload", value_schema=None,
                                  fail_on_data_loss=True, ack_mode="commit"))
        for page in StreamReplay(spec, "cmp:main").pages("-", "+", READ_PAGE):
            build.build("cmp:main", page, 1)

    def claim() -> None:
        op = ConsumerOps(spec, "cmp:main", f"cpu-{tag}", "c", cache_ack_ids=True)
        op.redis.xgroup_create("cmp:main", op.group, "0")
        try:
            while op.claimed(read_entries(pipeline(op.redis, [op.xreadgroup(2000)])[0])):
                pass
        finally:
            op.redis.xgroup_destroy("cmp:main", op.group)

    def write() -> None:
        stream = f"cmp:cpu:{tag}"
        w = EventBusDataSource({"url": url, "stream": stream}).writer(_sink_schema(), False)
        write_partition(w.opts, w.plan, f"cpu-{tag}-{time.time()}", "0", 0, iter(batches))
        redis.Redis.from_url(url).delete(stream)

    job = {"cpu:read": read, "cpu:claim": claim, "cpu:write": write}[part]
    job()  # warm: connections, imports, scripts
    best = min(_cpu_of(job) for _ in range(3))
    return {"seconds": best, "driver": spark_eventbus.__file__, "worker": spark_eventbus.__file__,
            "cpu": {}, "rows": 0, "calls": {}}


def _cpu_of(job: Any) -> float:
    start = time.process_time()
    job()
    return time.process_time() - start


def _sink_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("key", StringType()), StructField("payload", StringType())])


def measure(part: str, url: str, tag: str, rows_file: str) -> dict[str, object]:
    """One measurement in this (fresh) driver process; ``spark_eventbus`` from PYTHONPATH.
    Self-contained on purpose: importing ``bench.py`` here would put this checkout's package
    ahead of the revision under test (it inserts the repository into ``sys.path``)."""
    from pyspark.sql import SparkSession

    import spark_eventbus

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_eventbus.register(spark)
    cpu: dict[str, float] = {}
    calls: dict[str, int] = {}

    def timed(job: Any) -> float:
        """``job()``'s wall seconds; its CPU (Redis, this process tree) into ``cpu``, the
        Redis commands it ran into ``calls``."""
        calls0, redis0, tree0 = _calls(url), _redis_cpu(url), _tree_cpu()
        start = time.perf_counter()
        job()
        seconds = time.perf_counter() - start
        tree = _tree_cpu()
        side = {k: tree[k] - tree0.get(k, 0.0) for k in tree}
        cpu.update(redis=_redis_cpu(url) - redis0, spark=sum(side.values()), **side)
        calls.update({k: n - calls0.get(k, 0) for k, n in _calls(url).items()
                      if n > calls0.get(k, 0)})
        for k in ("info",):  # this function's own
            calls.pop(k, None)
        return seconds

    rows = 0
    if part == "latency":
        seconds = _latency(spark, url, tag) / 1000
    elif part == "floor":  # Spark's floor (bench/floor.py), as many rows as cmp:main holds
        import redis

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from floor import register_floor

        register_floor(spark, PER_TRIGGER, 2)

        def floor_run(n: int) -> Any:
            q = (spark.readStream.format("floor").option("rows", str(n)).load()
                 .writeStream.format("noop")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="cmp-chk-"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            return q

        floor_run(WARMUP)
        total = int(redis.Redis.from_url(url).xlen("cmp:main"))
        done: list[Any] = []
        seconds = timed(lambda: done.append(floor_run(total)))
        rows = sum(p["numInputRows"] for p in done[0].recentProgress)
    elif part in ("reader", "nogroup") or part.startswith(MANY):
        many = part.startswith(MANY)

        def run(stream: str, group: str) -> Any:
            reader = (spark.readStream.format("eventbus").option("url", url)
                      .option("stream", stream).option("startingPosition", "earliest"))
            if part != "nogroup" and not part.startswith("manyng:"):
                reader = reader.option("group", group).option("consumer", "c")
            if not many:
                reader = reader.option("maxEntriesPerTrigger", str(PER_TRIGGER))
            q = (reader.load()
                 .writeStream.format("noop")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="cmp-chk-"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            return q

        run("cmp:warmup", f"warm-{tag}")
        queries: list[Any] = []
        seconds = timed(lambda: queries.append(
            run(",".join(many_streams(streams_of(part))) if many else "cmp:main", tag)))
        rows = sum(p["numInputRows"] for p in queries[0].recentProgress)
    else:
        df = spark.read.parquet(rows_file).cache()
        df.count()

        def write(frame: object, stream: str) -> None:
            frame.write.format("eventbus").option("url", url).option(  # type: ignore[attr-defined]
                "stream", stream).mode("append").save()

        write(df.limit(WARMUP), f"cmp:warm:{tag}")
        seconds = timed(lambda: write(df, f"cmp:sink:{tag}"))
    worker_copy = spark.sparkContext.parallelize([0], 1).map(
        lambda _: __import__("spark_eventbus").__file__).collect()[0]
    spark.stop()
    return {"seconds": seconds, "driver": spark_eventbus.__file__, "worker": worker_copy,
            "cpu": cpu, "rows": rows, "calls": calls}


def _latency(spark: Any, url: str, tag: str, rate: int = 5_000, seconds: float = 15) -> float:
    """The settled median latency in ms of an eventbus → eventbus query at ``rate``/s."""
    import redis
    from pyspark.sql import functions as F

    r = redis.Redis.from_url(url)
    src, dst = f"cmp:lat:{tag}", f"cmp:lat:{tag}:out"
    q = (spark.readStream.format("eventbus").option("url", url).option("stream", src)
         .option("group", "lat").option("startingPosition", "earliest").load()
         .select(F.map_concat("fields", F.create_map(F.lit("src"), F.col("id")))
                 .alias("fields"))
         .writeStream.format("eventbus").option("url", url).option("stream", dst)
         .option("checkpointLocation", tempfile.mkdtemp(prefix="cmp-lat-")).start())
    while not any("addBatch" in p["durationMs"] for p in q.recentProgress):
        time.sleep(0.1)
    payload = b'{"order_id": 0, "note": "' + b"x" * 150 + b'"}'
    produced, start = 0, time.time()
    while time.time() - start < seconds:
        due = int((time.time() - start) * rate)
        if due > produced:
            pipe = r.pipeline(transaction=False)
            for _ in range(due - produced):
                pipe.xadd(src, {"payload": payload})
            pipe.execute()
            produced = due
        time.sleep(0.005)
    deadline = time.time() + 60
    while r.xlen(dst) < produced and time.time() < deadline:
        time.sleep(0.2)
    q.stop()
    t0 = int(start * 1000)
    settled = []
    for entry_id, fields in r.xrange(dst):
        src_ms = int(fields[b"src"].split(b"-")[0])
        if src_ms - t0 >= 5000:
            settled.append(int(entry_id.split(b"-")[0]) - src_ms)
    assert r.xlen(dst) == produced, (r.xlen(dst), produced)
    r.delete(src, dst)
    return float(statistics.median(settled))


MANY = ("many:", "manyng:")  # parts over many streams: with a group, without


def streams_of(part: str) -> int:
    """N of ``many:N`` / ``manyng:N``."""
    return int(part.partition(":")[2])


def many_streams(n: int) -> list[str]:
    return [f"cmp:many:{n}:{i}" for i in range(n)]


def _figure(part: str, seconds: float, args: argparse.Namespace) -> str:
    if part == "latency":
        return f"p50 {seconds * 1000:6.0f} ms (from 5 s on)"
    if part.startswith("cpu:"):
        return f"CPU {seconds / args.entries * 1e6:6.2f} us/entry"
    return f"{seconds:6.2f} s {_entries(part, args) / seconds:>9,.0f} rows/s"


def _entries(part: str, args: argparse.Namespace) -> int:
    return int(args.many_entries if part.startswith(MANY) else args.entries)


def _cpu_figure(part: str, cpu: dict[str, float], args: argparse.Namespace) -> str:
    if not cpu:
        return ""
    n = _entries(part, args)
    split = (f" (JVM {cpu['jvm'] / n * 1e6:.2f}, Python {cpu['python'] / n * 1e6:.2f})"
             if "jvm" in cpu else "")
    return (f"  CPU/entry: redis {cpu['redis'] / n * 1e6:5.2f} us, "
            f"spark {cpu['spark'] / n * 1e6:6.2f} us{split}")


def _ratios(runs: dict[tuple[str, str], list[dict[str, Any]]], parts: list[str],
            revs: list[str], args: argparse.Namespace) -> None:
    """Each revision after the first against the first, per part: the median of the per-round
    ratios and their range (the spread), for speed (rows/s; latency: base p50 / p50, so > 1 is
    better either way) and for CPU per entry (revision / base: < 1 is cheaper)."""
    base = revs[0]
    for rev in revs[1:]:
        noise = NOISE
        if "floor" in parts:  # the same code on both sides: how far this run's pairs stray
            floor = [b["seconds"] / r["seconds"] for b, r in
                     zip(runs[("floor", base)], runs[("floor", rev)], strict=True)]
            noise = max(NOISE, *(abs(1 - x) for x in floor))
        print(f"{rev} against {base} (per-round ratios: median [min - max]; speed > 1.00 and "
              f"CPU < 1.00 are better; a verdict needs every round on one side and the median "
              f"beyond {noise:.0%}, the floor's own stray or {NOISE:.0%}):")
        for part in parts:
            pairs = list(zip(runs[(part, base)], runs[(part, rev)], strict=True))
            speed = [b["seconds"] / r["seconds"] for b, r in pairs]
            line = f"  {part:<8} speed {_spread(speed)}"
            for side in ("redis", "spark"):
                if all(b["cpu"].get(side) and r["cpu"].get(side) for b, r in pairs):
                    cost = [r["cpu"][side] / b["cpu"][side] for b, r in pairs]
                    line += f"   {side} CPU {_spread(cost)}"
            print(line + f"   {_verdict(speed, noise) if part != 'floor' else '(noise)'}")


def _against_floor(runs: dict[tuple[str, str], list[dict[str, Any]]], parts: list[str],
                   revs: list[str]) -> None:
    """With part ``floor``: each reader's rate against Spark's floor measured in the same round
    by the same revision's driver (the floor's time / the reader's), median [min - max]."""
    if "floor" not in parts:
        return
    print("against Spark's floor (floor time / reader time per round: 1.00 = as fast as Spark's "
          "in-memory Python source):")
    for part in ("reader", "nogroup"):
        if part not in parts:
            continue
        for rev in revs:
            pairs = zip(runs[("floor", rev)], runs[(part, rev)], strict=True)
            ratios = [f["seconds"] / r["seconds"] for f, r in pairs]
            print(f"  {part:<8} {rev:<12} {_spread(ratios)}")


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f} - {max(xs):.2f}]"


# The least stray a verdict needs (the median per-round ratio beyond 1 +/- this)
NOISE = 0.05


def _verdict(speed: list[float], noise: float) -> str:
    med = statistics.median(speed)
    if min(speed) > 1.0 and med > 1 + noise:
        return "faster"
    if max(speed) < 1.0 and med < 1 - noise:
        return "SLOWER: fix it or say why (docs/development.md)"
    return "within spread"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        how = measure_cpu if sys.argv[2].startswith("cpu:") else measure
        print("RESULT " + json.dumps(how(*sys.argv[2:6])))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("revisions", nargs="+", help="git revisions; '.' is the working tree")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--parts", default="reader,sink")
    ap.add_argument("--many-entries", type=int, default=20_000)
    args = ap.parse_args()
    parts = args.parts.split(",")

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import pyarrow as pa
    import pyarrow.parquet as pq
    import redis

    from bench import bench_redis, plain_many, produce

    work = Path(tempfile.mkdtemp(prefix="eventbus-compare-"))
    trees: dict[str, Path] = {}
    try:
        for rev in args.revisions:
            if rev == ".":
                trees[rev] = ROOT
                continue
            tree = work / f"rev-{len(trees)}"
            made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach",
                                   str(tree), rev], capture_output=True, text=True)
            if made.returncode != 0:
                raise SystemExit(f"revision {rev!r}: {made.stderr.strip()}")
            trees[rev] = tree
        with bench_redis("eventbus-compare-redis-") as (port, _):
            r = redis.Redis(port=port)
            url = f"redis://127.0.0.1:{port}/0"
            produce(r, WARMUP, "cmp:warmup")
            if {"reader", "nogroup", "floor", "cpu:read", "cpu:claim"} & set(parts):
                produce(r, args.entries, "cmp:main")
            filled: set[int] = set()  # many:N and manyng:N read the same streams
            for part in parts:
                if part.startswith(MANY) and streams_of(part) not in filled:
                    filled.add(streams_of(part))
                    streams = many_streams(streams_of(part))
                    pipe = r.pipeline(transaction=False)
                    for i in range(args.many_entries):
                        pipe.xadd(streams[i % len(streams)], {"n": str(i), "payload": "x" * 60})
                    pipe.execute()
                    secs, got = plain_many(r, streams, "plain")
                    assert got == args.many_entries, got
                    print(f"plain redis-py loop {part}: {secs:.3f} s", flush=True)
            rows_file = str(work / "rows.parquet")
            filler = "x" * 120
            pq.write_table(pa.table({
                "key": [f"k{i}" for i in range(args.entries)],
                "payload": [f'{{"i": {i}, "note": "{filler}"}}' for i in range(args.entries)],
            }), rows_file)
            times: dict[tuple[str, str], list[dict[str, Any]]] = {}
            runs = 0
            for k in range(args.rounds):
                revs = list(trees.items())
                order = revs[k % len(revs):] + revs[:k % len(revs)]  # no revision always last
                for part in parts:
                    for rev, tree in order:
                        runs += 1
                        tag = f"run-{runs}"
                        env = dict(os.environ, PYTHONPATH=str(tree),
                                   PYSPARK_PYTHON=sys.executable)
                        # cwd: not a checkout (Spark's workers put their cwd on sys.path)
                        out = subprocess.run(
                            [sys.executable, __file__, "measure", part, url, tag, rows_file],
                            env=env, cwd=work, capture_output=True, text=True)
                        lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                        if out.returncode != 0 or not lines:
                            raise SystemExit(f"{part} at {rev} failed:\n{out.stderr[-4000:]}")
                        res = json.loads(lines[0][7:])
                        for side in ("driver", "worker"):
                            if not str(res[side]).startswith(str(tree)):
                                raise SystemExit(f"{part} at {rev}: the {side} imported "
                                                 f"{res[side]}, not the copy in {tree}")
                        if part == "reader":
                            left = r.xpending("cmp:main", tag)["pending"]
                            assert left == 0, f"{rev}: {left} entries left pending"
                        if part in ("reader", "nogroup", "floor"):
                            assert res["rows"] == args.entries, (rev, part, res["rows"])
                        elif part.startswith("manyng:"):
                            assert res["rows"] == args.many_entries, (rev, part, res["rows"])
                        elif part.startswith("many:"):
                            streams = many_streams(streams_of(part))
                            pipe = r.pipeline(transaction=False)
                            for s_ in streams:
                                pipe.xinfo_groups(s_)
                            infos = pipe.execute()
                            done = sum(int(g["entries-read"] or 0) for gs in infos for g in gs
                                       if g["name"].decode() == tag)
                            left = sum(int(g["pending"]) for gs in infos for g in gs
                                       if g["name"].decode() == tag)
                            assert (done, left) == (args.many_entries, 0), (rev, done, left)
                        elif part == "sink":
                            assert r.xlen(f"cmp:sink:{tag}") == args.entries, rev
                            r.delete(f"cmp:sink:{tag}", f"cmp:warm:{tag}")
                        seconds = float(res["seconds"])
                        times.setdefault((part, rev), []).append(res)
                        print(f"round {k} {part:<8} {rev:<12} {_figure(part, seconds, args)}"
                              f"{_cpu_figure(part, res['cpu'], args)}", flush=True)
            print("medians:")
            for (part, rev), xs in times.items():
                med = statistics.median(x["seconds"] for x in xs)
                cpu = ({side: statistics.median(x["cpu"][side] for x in xs)
                        for side in xs[0]["cpu"]} if all(x["cpu"] for x in xs) else {})
                each = ", ".join(f"{x['seconds']:.3f}" for x in xs)
                print(f"  {part:<8} {rev:<12} {_figure(part, med, args)}"
                      f"{_cpu_figure(part, cpu, args)} (runs: {each})")
            print("Redis commands per measured run (medians; the same data, so a change here is "
                  "the code's, not the machine's):")
            for (part, rev), xs in times.items():
                if not all(x.get("calls") for x in xs):
                    continue
                names = sorted({k for x in xs for k in x["calls"]})
                med = {k: statistics.median(x["calls"].get(k, 0) for x in xs) for k in names}
                shown = ", ".join(f"{k} {v:,.0f}" for k, v in
                                  sorted(med.items(), key=lambda kv: -kv[1]))
                print(f"  {part:<8} {rev:<12} {sum(med.values()):>9,.0f}: {shown}")
            _against_floor(times, parts, list(trees))
            _ratios(times, parts, list(trees), args)
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tree)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
