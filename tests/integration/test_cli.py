"""The operator CLI against a real Redis (issue 3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import produce
from tests.redis_server import free_port

pytestmark = pytest.mark.integration


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spark_eventbus", *args], capture_output=True,
                          text=True, timeout=60)


def test_status_shows_groups_consumers_and_dead_letters(redis_server, names):
    r = redis_server.client()
    produce(r, names["stream"], 100)
    r.xgroup_create(names["stream"], names["group"], "0")
    r.xreadgroup(names["group"], "worker-1", {names["stream"]: ">"}, count=30)
    r.xadd(names["dlq"], {"payload": "x", "dlq.reason": "r"})
    out = _cli("--url", redis_server.url, "status", "--stream", names["stream"])
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"group {names['group']}: lag 70, pending 30" in text
    assert "worker-1" in text and f"dead-letter stream {names['dlq']}: 1 entries" in text
    js = json.loads(_cli("--url", redis_server.url, "status", "--stream", names["stream"],
                         "--group", names["group"], "--json").stdout)
    assert js["groups"][0]["consumers"] == [
        {"name": "worker-1", "pending": 30, "idle_ms": js["groups"][0]["consumers"][0]["idle_ms"]}]
    assert js["dead_letter_length"] == 1 and js["length"] == 100


def test_dlq_replay_moves_each_entry_once_without_dlq_fields(redis_server, names):
    r = redis_server.client()
    for i in range(30):
        r.xadd(names["dlq"], {"payload": f"p{i}", "n": str(i), "dlq.reason": "bad",
                              "dlq.source.id": f"{i}-0"})
    first = _cli("--url", redis_server.url, "dlq", "replay", "--from", names["dlq"],
                 "--to", names["stream"], "--limit", "10")
    assert first.returncode == 0, first.stderr
    assert "moved 10 entries" in first.stdout
    assert r.xlen(names["dlq"]) == 20 and r.xlen(names["stream"]) == 10
    rest = _cli("--url", redis_server.url, "dlq", "replay", "--from", names["dlq"],
                "--to", names["stream"])
    assert "moved 20 entries" in rest.stdout
    moved = r.xrange(names["stream"])
    assert [f[b"n"] for _, f in moved] == [str(i).encode() for i in range(30)]
    assert all(not k.startswith(b"dlq.") for _, f in moved for k in f)
    assert r.exists(names["dlq"]) == 0 or r.xlen(names["dlq"]) == 0


@pytest.mark.parametrize("args", [
    ["status"],  # --stream missing
    ["--url", "http://x", "status", "--stream", "s"],
    ["dlq", "replay", "--from", "a", "--to", "b", "--limit", "0"],
    ["frobnicate"],
])
def test_bad_arguments_give_one_line_and_exit_2(args):
    out = _cli(*args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_unreachable_server_gives_one_line_and_exit_1():
    out = _cli("--url", f"redis://127.0.0.1:{free_port()}/0", "--password", "hunter2",
               "status", "--stream", "s")
    assert out.returncode == 1
    assert "Redis did not answer" in out.stderr and "hunter2" not in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_refuses_a_key_that_is_not_a_stream(redis_server, names):
    r = redis_server.client()
    r.set(names["stream"], "precious")
    out = _cli("--url", redis_server.url, "dlq", "replay", "--from", names["dlq"],
               "--to", names["stream"])
    assert out.returncode == 1 and "not a stream" in out.stderr
    assert r.get(names["stream"]) == b"precious"
