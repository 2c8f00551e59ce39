"""``make demo`` (runs from a checkout: it reads ``conf/``): sample orders through the pipe job
into parquet, with dead letters.

Uses the Redis at ``$EVENTBUS_URL`` (default ``redis://localhost:6379/0``); when nothing
answers there, starts a throwaway local ``redis-server`` (AOF on, ``conf/redis.conf``) on that
port and stops it afterwards. A few percent of the orders are malformed (bad JSON or a
non-positive amount): they end in the dead-letter stream, the rest in parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import redis

ROOT = Path(__file__).resolve().parent.parent  # the repository: scripts/demo.py


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def start_throwaway_redis(url: str, workdir: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit(f"no Redis answers at {url} and no redis-server binary is installed; "
                         "run `make install` (or install Debian's redis-server).")
    port = urlparse(url).port or 6379
    args = [binary]
    conf = ROOT / "conf" / "redis.conf"
    if conf.exists():
        args.append(str(conf))
    args += ["--port", str(port), "--dir", str(workdir), "--daemonize", "no",
             "--logfile", str(workdir / "redis.log")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not _answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"could not start redis-server on port {port}; see "
                             f"{workdir / 'redis.log'}")
        time.sleep(0.05)
    return proc


def produce_orders(r: redis.Redis, stream: str, n: int) -> None:
    rng = random.Random(42)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        amount = round(rng.uniform(1, 500), 2)
        if i % 50 == 31:
            amount = -amount  # fails is_valid
        body = json.dumps({"order_id": i, "customer": f"c{rng.randrange(500)}",
                           "amount": amount, "currency": "EUR"})
        if i % 50 == 7:
            body = body[:-5]  # truncated JSON
        pipe.xadd(stream, {"payload": body, "source": "demo"})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default=os.environ.get("EVENTBUS_URL", "redis://localhost:6379/0"))
    ap.add_argument("--entries", type=int, default=5000)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    work = Path(tempfile.mkdtemp(prefix="eventbus-demo-"))
    server = None
    if not _answers(args.url):
        print(f"no Redis at {args.url}: starting a throwaway redis-server in {work}")
        server = start_throwaway_redis(args.url, work)
    try:
        r = redis.Redis.from_url(args.url)
        stream = f"demo:orders:{uuid.uuid4().hex[:6]}"
        produce_orders(r, stream, args.entries)
        print(f"produced {args.entries} orders into stream {stream!r} (4% malformed)")

        from pyspark.sql import SparkSession

        from spark_eventbus.jobs.pipe import PipeConfig, build_query

        cfg = PipeConfig(
            source={"url": args.url, "stream": stream, "group": "demo-pipe",
                    "startingPosition": "earliest", "maxEntriesPerTrigger": "2000",
                    "ackMode": "manual",
                    "valueSchema": "order_id BIGINT, customer STRING, amount DOUBLE, "
                                   "currency STRING"},
            sink_format="parquet", sink_path=str(work / "orders.parquet"),  # out, below
            dead_letter_stream=f"{stream}:dlq", is_valid="value.amount > 0",
            checkpoint=str(work / "checkpoint"), select=("id", "timestamp", "value.*"))
        spark = (SparkSession.builder.master("local[2]").appName("eventbus-demo")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.extraJavaOptions",
                         f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        started = time.monotonic()
        q = build_query(spark, cfg)
        q.awaitTermination()
        if q.exception() is not None:
            print(f"query failed: {q.exception()}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
        out, dlq = str(work / "orders.parquet"), f"{stream}:dlq"
        written = spark.read.parquet(out).count()
        dead = r.xlen(dlq)
        info = next(g for g in r.xinfo_groups(stream) if g["name"].decode() == "demo-pipe")
        batches = sum(1 for p in q.recentProgress if p["numInputRows"])
        print(f"rows written:       {written} in {batches} batches ({elapsed:.1f} s)")
        print(f"rows dead-lettered: {dead} (stream {dlq!r})")
        print(f"pending:            {info['pending']}")
        print(f"lag:                {info['lag']}")
        print(f"output:             {out}")
        spark.stop()
        ok = written + dead == args.entries and info["pending"] == 0
        return 0 if ok else 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
