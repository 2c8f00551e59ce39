"""Helpers for integration tests: a plain redis-py producer and query runners."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery


def produce(r: redis.Redis, stream: str, n: int, start: int = 0, *,
            payload: Callable[[int], str] | None = None, pipeline: int = 1000) -> list[str]:
    """XADD ``n`` entries ``{"n": i, "payload": json}`` with a plain redis-py pipeline."""
    ids: list[str] = []
    for base in range(start, start + n, pipeline):
        pipe = r.pipeline(transaction=False)
        for i in range(base, min(base + pipeline, start + n)):
            body = payload(i) if payload else json.dumps({"n": i, "name": f"item-{i}"})
            pipe.xadd(stream, {"n": str(i), "payload": body})
        ids += [x.decode() if isinstance(x, bytes) else x for x in pipe.execute()]
    return ids


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``eventbus ARGS`` in this process (``spark_eventbus.ops.cli.main``, as the entry point calls
    it): its exit status (argparse's exit included), stdout and stderr. Saves a Python start
    per call; test_cli runs the real entry point as a process too (exit codes, a signal)."""
    from spark_eventbus.ops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse: 2 on a usage error
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["eventbus", *args], code, out.getvalue(), err.getvalue())


def driver_reader(url: str, stream: str, group: str, **extra: str) -> Any:
    """The streaming reader's driver half, to call ``initialOffset``/``latestOffset`` directly."""
    from spark_eventbus.group.stream_reader import EventBusStreamReader
    from spark_eventbus.options.reader import parse_reader_options

    opts = parse_reader_options({"url": url, "stream": stream, "group": group,
                                 "startingPosition": "earliest", **extra}, streaming=True)
    return EventBusStreamReader(opts, None)  # type: ignore[arg-type]


def stream_df(spark: SparkSession, url: str, stream: str, group: str, **options: Any
              ) -> DataFrame:
    reader = (spark.readStream.format("eventbus").option("url", url).option("stream", stream)
              .option("group", group).option("startingPosition", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / f"chk-{uuid.uuid4().hex[:6]}")


def run_available_now(df: DataFrame, tmp_path: Path, timeout: float = 300
                      ) -> tuple[list[Any], StreamingQuery]:
    """Run ``df`` with Trigger.AvailableNow into a memory table; return its rows."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    assert q.awaitTermination(timeout), "AvailableNow query did not finish"
    assert q.exception() is None, q.exception()
    rows = df.sparkSession.table(name).collect()
    return rows, q


def wait_for(cond: Callable[[], bool], timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def source_runners(spark: SparkSession) -> set[int]:
    """PIDs of the live streaming source runners of this classic session's JVM: the Python
    process Spark starts for each query with a Python source (its driver side), which the JVM
    stops with SIGTERM when the query stops and does not wait for."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    found: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == jvm and state != "Z" and RUNNER_MODULE.encode() in cmdline:
            found.add(int(proc.name))
    return found


def process_gone(pid: int) -> bool:
    """``pid`` has exited (a zombie its parent has not reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def pending(r: redis.Redis, stream: str, group: str) -> int:
    return int(r.xpending(stream, group)["pending"])


def lag(r: redis.Redis, stream: str, group: str) -> int | None:
    for g in r.xinfo_groups(stream):
        name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
        if name == group:
            return g.get("lag")
    raise AssertionError(f"group {group} not found")


def ids_of(rows: Iterable[Any]) -> list[str]:
    return [row["id"] for row in rows]


def input_rows(q: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def latest_offsets(q: StreamingQuery) -> list[dict[str, Any]]:
    """The ``reportLatestOffset`` dicts of every progress report of ``q``'s first source."""
    out = []
    for p in q.recentProgress:
        raw = p["sources"][0].get("latestOffset")
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        if parsed:  # "null" in the progress of a batch replayed after a restart
            out.append(parsed)
    return out


def committed_batches(chk: Path) -> int:
    """How many batches a query's checkpoint has committed (files in ``commits/``)."""
    d = chk / "commits"
    return sum(1 for p in d.iterdir() if p.name.isdigit()) if d.exists() else 0


def kill_and_restart(bases: list[list[str]], chks: list[Path], logs: Path, times: int,
                     seed: int, batches: list[int]) -> None:
    """Run the queries ``bases`` (commands), each as its own driver process, ``times`` times;
    in each run all of them are killed with SIGKILL (driver and JVM) at a random moment after
    every checkpoint of ``chks`` (one per command) committed two more batches (or all of its
    ``batches``: its input is used up)."""
    rng = random.Random(seed)
    for run in range(times):
        before = [committed_batches(c) for c in chks]
        logs_of = [logs / f"run{run}-{i}.log" for i in range(len(bases))]
        procs = []
        for base, log_path in zip(bases, logs_of, strict=True):
            with open(log_path, "wb") as log:
                procs.append(subprocess.Popen(base, stdout=log, stderr=log,
                                              start_new_session=True))
        try:
            wait_for(lambda n=before, ps=procs: any(p.poll() is not None for p in ps) or all(
                committed_batches(c) >= min(b + 2, total)
                for c, b, total in zip(chks, n, batches, strict=True)),
                240, "the queries to commit two batches each")
            for p, log_path in zip(procs, logs_of, strict=True):
                assert p.poll() is None, log_path.read_text()[-3000:]
            time.sleep(rng.uniform(0.0, 0.6))  # land the kill anywhere inside a batch
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


def rejected_calls(node: Any, command: str) -> int:
    """How many ``command`` calls the server ``node`` (a harness server) refused before running
    them (``INFO commandstats``): a cluster redirection (MOVED, ASK) counts."""
    stats = node.client().info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("rejected_calls", 0))
