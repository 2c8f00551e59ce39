"""The pipe job through spark-submit, end to end (issue 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.helpers import pending, produce

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _source_toml(url: str, names: dict[str, str], extra: str) -> str:
    """The [source] table of a pipe config reading the test's stream from the start."""
    return f"""
[source]
url = "{url}"
stream = "{names['stream']}"
group = "{names['group']}"
startingPosition = "earliest"
{extra}
"""


def _copy_pipe_config(path: Path, url: str, names: dict[str, str], extra: str, target: str,
                      checkpoint: Path) -> Path:
    """A pipe config copying the test's stream into the eventbus stream ``target``, each entry
    tagged with its source ID (``src``); written to ``path``."""
    path.write_text(_source_toml(url, names, extra) + f"""
[sink]
format = "eventbus"
select = ["map_concat(fields, map('src', id)) AS fields"]
options = {{ stream = "{target}" }}

[query]
checkpoint = "{checkpoint}"
""")
    return path


def test_pipe_job_runs_through_spark_submit(redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 1_000,
                  payload=lambda i: "{oops" if i % 20 == 0 else json.dumps({"n": i, "amount": i}))
    bad = {ids[i] for i in range(0, 1_000, 20)} | {ids[1]}  # amount 1: fails is_valid below
    out, chk = tmp_path / "out", tmp_path / "chk"
    config = tmp_path / "pipe.toml"
    config.write_text(_source_toml(redis_server.url, names,
                                   'valueSchema = "n BIGINT, amount DOUBLE"') + f"""
[sink]
format = "parquet"
path = "{out}"
select = ["id", "value.*"]

[dead_letter]
stream = "{names['dlq']}"
is_valid = "value.amount <> 1"

[query]
checkpoint = "{chk}"
""")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    run = subprocess.run(
        [str(spark_submit), "--properties-file", "conf/spark-defaults.conf",
         "spark_eventbus/jobs/pipe.py", "--config", str(config)],
        cwd=ROOT, capture_output=True, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    summary = json.loads(run.stdout.decode().strip().splitlines()[-1])
    assert summary["rows_read"] == 1_000
    written = pq.read_table(out).column("id").to_pylist()
    assert sorted(written) == sorted(set(ids) - bad)
    assert r.xlen(names["dlq"]) == len(bad)
    assert pending(r, names["stream"], names["group"]) == 0


def test_pipe_job_into_an_eventbus_stream_is_exactly_once(spark, redis_server, names, tmp_path):
    """The pipe with the eventbus output; the last batch is replayed (its commit is removed
    from the checkpoint, as if the driver died after writing it): nothing is written twice."""
    from spark_eventbus.jobs.pipe import build_query, load_config

    r = redis_server.client()
    ids = produce(r, names["stream"], 3_000)
    target, chk = names["stream"] + ":out", tmp_path / "chk"
    config = _copy_pipe_config(tmp_path / "pipe.toml", redis_server.url, names,
                               "maxEntriesPerTrigger = 1000", target, chk)
    cfg = load_config(config)
    q = build_query(spark, cfg)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert r.xlen(target) == 3_000
    last = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    for f in (f"{last}", f".{last}.crc"):  # the driver "died" before logging the commit
        (chk / "commits" / f).unlink(missing_ok=True)
    q = build_query(spark, cfg)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 1_000  # batch replayed
    copied = [f[b"src"].decode() for _, f in r.xrange(target)]
    assert sorted(copied) == sorted(ids)  # the replayed batch added nothing


def test_a_failing_query_is_one_line_and_verbose_keeps_the_traceback(names, tmp_path):
    """Redis unreachable: exit 1 with the connector's message in one line, no Java or Python
    stack traces (they come back with --verbose)."""
    from tests.harness.redis_server import free_port

    # failoverTimeoutMs = 1000: a server that never answered is given at most that (not 5 s)
    config = _copy_pipe_config(tmp_path / "pipe.toml", f"redis://127.0.0.1:{free_port()}/0",
                               names, "failoverTimeoutMs = 1000", names["stream"] + ":out",
                               tmp_path / "chk")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    base = [str(spark_submit), "--properties-file", "conf/spark-defaults.conf",
            "spark_eventbus/jobs/pipe.py", "--config", str(config)]
    run = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=600)
    # spark-submit passes the Python driver's stderr on to its stdout
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    failed = [line for line in out.splitlines() if line.startswith("pipe: the query failed")]
    assert len(failed) == 1, out[-3000:]
    assert "Redis did not answer" in failed[0] and "--verbose" in failed[0]
    assert "Traceback" not in out and "\tat org.apache" not in out, out
    assert len(out.splitlines()) <= 3, out  # the JVM's own start-up notice at most
    verbose = subprocess.run([*base, "--verbose"], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stdout + verbose.stderr
    assert "\tat org.apache" in verbose.stdout + verbose.stderr
