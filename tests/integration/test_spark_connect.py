"""Spark Connect (issue 11): a client with no JVM against a Connect server started by the tests
as its own process; the data source and the foreachBatch functions run in the server's Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.lean_env import WITHOUT_EVENTBUS, lean_python
from tests.harness.redis_server import free_port
from tests.harness.spark_connect import ConnectServer
from tests.integration.helpers import pending, produce
from tests.integration.test_pipe_job import _copy_pipe_config

pytestmark = [pytest.mark.integration, pytest.mark.deploy, pytest.mark.xdist_group("connect")]
JOBS = Path(__file__).parent / "jobs"


def _client_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_reads_sink_and_acking_writer_through_spark_connect(connect_server, redis_server, names):
    r = redis_server.client()
    tag = names["tag"]
    source, copy, bad, dlq = (f"sc{tag}:{x}" for x in ("in", "copy", "bad", "dlq"))
    ids = produce(r, source, 2_000)
    bad_ids = produce(r, bad, 500, payload=lambda i: "{oops" if i % 5 == 0
                      else json.dumps({"n": i, "name": "x"}))
    run = subprocess.run(
        [sys.executable, str(JOBS / "connect_client.py"), "--remote", connect_server.remote,
         "--url", redis_server.url, "--source", source, "--copy", copy, "--bad", bad,
         "--dlq", dlq], capture_output=True, text=True, timeout=600, env=_client_env())
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary == {"batch_rows": 2_000, "copy_error": None, "acking_error": None}
    copied = Counter(f[b"src"].decode() for _, f in r.xrange(copy))
    assert copied == Counter(ids)
    assert pending(r, source, "g") == 0
    moved = {f[b"dlq.source.id"].decode() for _, f in r.xrange(dlq)}
    assert moved == {bad_ids[i] for i in range(0, 500, 5)}
    assert pending(r, bad, "g") == 0


def test_pipe_job_against_the_connect_server(connect_server, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 1_500)
    target = names["stream"] + ":out"
    config = _copy_pipe_config(tmp_path / "pipe.toml", redis_server.url, names,
                               "maxEntriesPerTrigger = 500", target, tmp_path / "chk")
    run = subprocess.run([sys.executable, "-m", "spark_eventbus.jobs.pipe", "--config",
                          str(config)], capture_output=True, text=True, timeout=600,
                         env={**_client_env(), "SPARK_REMOTE": connect_server.remote})
    (tmp_path / "pipe.err").write_text(run.stderr)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["rows_read"] == 1_500
    assert sorted(f[b"src"].decode() for _, f in r.xrange(target)) == sorted(ids)
    assert pending(r, names["stream"], names["group"]) == 0


def test_writes_from_client_threads_need_no_register(connect_server, redis_server, names):
    """Issue 29 under Connect: the server runs each request with its session active, so writes
    and a streaming start from new client threads find format("eventbus") with no call."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 600)
    prefix = names["stream"] + ":t"
    run = subprocess.run(
        [sys.executable, str(JOBS / "connect_threads.py"), "--remote", connect_server.remote,
         "--url", redis_server.url, "--source", names["stream"], "--prefix", prefix],
        capture_output=True, text=True, timeout=600, env=_client_env())
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got == {"writes": [None] * 4, "stream": None, "register": None}, (
        json.dumps(got, indent=1)[:6000] + "\nconnect server log:\n"
        + (connect_server.workdir / "connect-server.log").read_text(errors="replace")[-6000:])
    for i in range(4):
        entries = [f for _, f in r.xrange(f"{prefix}:{i}")]
        assert Counter(int(f[b"n"]) for f in entries) == Counter(range(500))
    copied = Counter(f[b"src"].decode() for _, f in r.xrange(names["stream"] + ":copy"))
    assert copied == Counter(ids)
    assert pending(r, names["stream"], "g") == 0


def test_a_connect_server_without_the_package_says_what_to_install(redis_server,
                                                                   tmp_path_factory, names):
    work = tmp_path_factory.mktemp("bare-connect")
    python = lean_python(work / "lean", WITHOUT_EVENTBUS)
    server = ConnectServer(work / "server", python=str(python)).start()
    try:
        run = subprocess.run(
            [sys.executable, str(JOBS / "connect_bare.py"), "--remote", server.remote,
             "--url", redis_server.url, "--stream", "bare:" + names["tag"]],
            capture_output=True, text=True, timeout=300, env=_client_env())
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-3000:]
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    # format("eventbus"): Spark's own error names the format
    assert "Failed to find the data source: eventbus" in errors["read"], errors["read"]
    # the pickled AckingBatchWriter: what is missing, where, and the command to install it
    assert "spark-eventbus is not installed in the Python that runs this AckingBatchWriter" \
        in errors["acking"], errors["acking"]
    assert str(python) in errors["acking"] and "pip install 'spark-eventbus==" in errors["acking"]


def test_secrets_stay_out_of_what_a_connect_client_and_server_show(connect_server, own_redis,
                                                                   tmp_path, names):
    secret = "s3cret-" + uuid.uuid4().hex[:8]
    own_redis.password = secret
    own_redis.start()
    stream = "sec:" + names["tag"]
    produce(own_redis.client(), stream, 200)
    log = connect_server.workdir / "connect-server.log"
    log_start = log.stat().st_size
    chk = tmp_path / "chk"
    bad_url = f"redis://user:{secret}@127.0.0.1:{free_port()}/0"
    run = subprocess.run(
        [sys.executable, str(JOBS / "connect_secrets.py"), "--remote", connect_server.remote,
         "--url", own_redis.url, "--bad-url", bad_url, "--password", secret,
         "--stream", stream, "--checkpoint", str(chk)],
        capture_output=True, text=True, timeout=300, env=_client_env())
    assert run.returncode == 0, run.stderr[-3000:]
    texts = json.loads(run.stdout.strip().splitlines()[-1])
    assert texts["query_error"] == "None" and "numInputRows" in texts["progress"]
    assert "eventbus" in texts["plan"].lower()
    assert "user:***@" in texts["unreachable"]
    assert "password" in texts["wrong_password"].lower()
    with open(log, "rb") as f:  # what the server logged meanwhile
        f.seek(log_start)
        texts["server log"] = f.read().decode(errors="replace")
    texts["client stderr"] = run.stderr
    texts.update({str(p): p.read_text(errors="replace") for p in chk.rglob("*") if p.is_file()})
    assert any("offsets" in name for name in texts)
    for where, text in texts.items():
        assert secret not in text, where
