"""The operator CLI against a real Redis (issue 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.harness.redis_server import free_port
from tests.integration.helpers import driver_reader, produce, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.server]


_cli = run_cli  # in this process; the entry point itself runs as a process below


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
    assert "Moved 10 entries" in first.stdout
    assert r.xlen(names["dlq"]) == 20 and r.xlen(names["stream"]) == 10
    rest = _cli("--url", redis_server.url, "dlq", "replay", "--from", names["dlq"],
                "--to", names["stream"])
    assert "Moved 20 entries" in rest.stdout
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
    # the CLI's words: its flags, this machine (not Spark's options and executors)
    assert "--url" in out.stderr and "--failover-timeout-ms" in out.stderr
    assert "option '" not in out.stderr and "executor" not in out.stderr


def test_refuses_a_key_that_is_not_a_stream(redis_server, names):
    r = redis_server.client()
    r.set(names["stream"], "precious")
    out = _cli("--url", redis_server.url, "dlq", "replay", "--from", names["dlq"],
               "--to", names["stream"])
    assert out.returncode == 1 and "not a stream" in out.stderr
    assert r.get(names["stream"]) == b"precious"


def _group_info(r, stream: str, group: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return next(g for g in r.xinfo_groups(stream) if g["name"].decode() == group)


def test_group_create_at_a_timestamp_and_seek_refused_under_a_live_query(redis_server, names):
    r = redis_server.client()
    s, g = names["stream"], names["group"]
    ids = [r.xadd(s, {"n": str(i)}, id=f"{1000 + i}-0").decode() for i in range(10)]
    made = _cli("--url", redis_server.url, "group", "create", "--stream", s, "--group", g,
                "--to", "1970-01-01T00:00:01.004Z", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["after"] == f"1003-{2**64 - 1}"
    assert r.xreadgroup(g, "c", {s: ">"}, count=1)[0][1][0][0].decode() == ids[4]
    again = _cli("--url", redis_server.url, "group", "create", "--stream", s, "--group", g)
    assert again.returncode == 1 and "already has a consumer group" in again.stderr

    reader = driver_reader(redis_server.url, s, g)  # a live query: it holds a consumer lease
    reader.initialOffset()
    try:
        refused = _cli("--url", redis_server.url, "group", "seek", "--stream", s, "--group", g,
                       "--to", "earliest")
        assert refused.returncode == 1, refused.stdout
        assert f"consumer 'spark-{g}'" in refused.stderr and "--force" in refused.stderr
        assert refused.stderr.count("\n") == 1
        forced = _cli("--url", redis_server.url, "group", "seek", "--stream", s, "--group", g,
                      "--to", "earliest", "--force")
        assert forced.returncode == 0, forced.stderr
        assert "A running query reads the group" in forced.stdout
    finally:
        reader.stop()
    info = _group_info(r, s, g)
    assert info["last-delivered-id"].decode() == f"999-{2**64 - 1}"
    assert (info["entries-read"], info["lag"]) == (0, 10)  # ENTRIESREAD set: the lag is exact
    latest = _cli("--url", redis_server.url, "group", "seek", "--stream", s, "--group", g,
                  "--to", "latest")
    assert latest.returncode == 0 and f"after {ids[-1]}" in latest.stdout


def test_consumer_forget_moves_pending_entries_before_deleting(redis_server, names):
    r = redis_server.client()
    s, g = names["stream"], names["group"]
    produce(r, s, 50)
    r.xgroup_create(s, g, "0")
    taken = [i.decode() for i, _ in r.xreadgroup(g, "worker-1", {s: ">"}, count=30)[0][1]]
    out = _cli("--url", redis_server.url, "consumer", "forget", "worker-1", "--to", "worker-2",
               "--stream", s, "--group", g)
    assert out.returncode == 0, out.stderr
    assert "Moved 30 pending entries" in out.stdout
    rows = r.xpending_range(s, g, "-", "+", 100)
    assert sorted(x["message_id"].decode() for x in rows) == sorted(taken)
    assert {x["consumer"].decode() for x in rows} == {"worker-2"}
    assert {x["times_delivered"] for x in rows} == {1}  # moved, not delivered again
    assert "worker-1" not in {c["name"].decode() for c in r.xinfo_consumers(s, g)}
    gone = _cli("--url", redis_server.url, "consumer", "forget", "worker-1", "--to", "w",
                "--stream", s, "--group", g)
    assert gone.returncode == 1 and "has no consumer 'worker-1'" in gone.stderr


def test_dlq_list_and_show(redis_server, names):
    r = redis_server.client()
    dlq = names["dlq"]
    ids = [r.xadd(dlq, {"payload": f"p{i}", "dlq.reason": f"malformed JSON {i}",
                        "dlq.source.stream": names["stream"], "dlq.source.id": f"{i}-0",
                        "dlq.delivery_count": str(i)}).decode() for i in range(3)]
    listed = _cli("--url", redis_server.url, "dlq", "list", "--dlq", dlq, "--count", "2")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["id", "reason", "source", "stream", "source", "id",
                                "deliveries"]
    assert [line.split()[0] for line in lines[1:]] == [ids[2], ids[1]]  # newest first
    assert lines[0].index("reason") == lines[1].index("malformed")  # columns line up
    js = json.loads(_cli("--url", redis_server.url, "dlq", "list", "--dlq", dlq,
                         "--json").stdout)
    assert [e["dlq.source.id"] for e in js] == ["2-0", "1-0", "0-0"]
    shown = _cli("--url", redis_server.url, "dlq", "show", ids[0], "--dlq", dlq, "--json")
    assert json.loads(shown.stdout)["fields"]["payload"] == "p0"
    missing = _cli("--url", redis_server.url, "dlq", "show", "1-1", "--dlq", dlq)
    assert missing.returncode == 1 and "has no entry '1-1'" in missing.stderr


def test_status_watch_refreshes_until_interrupted(redis_server, names):
    r = redis_server.client()
    produce(r, names["stream"], 10)
    line = f"stream {names['stream']}: 10 entries"
    # Unbuffered: each refresh reaches the pipe as it is printed. Interrupted once two
    # refreshes were read, not after a guessed time (pytest-timeout bounds the wait).
    proc = subprocess.Popen([sys.executable, "-m", "spark_eventbus", "--url", redis_server.url,
                             "status", "--stream", names["stream"], "--watch", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    seen = []
    while sum(line in s for s in seen) < 2:
        got = proc.stdout.readline()
        assert got, f"the watch ended early: {proc.communicate()[1]}"
        seen.append(got)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "".join([*seen, out]).count(line) >= 2


def test_status_takes_a_stream_pattern(redis_server, names):
    r = redis_server.client()
    base = names["stream"]
    for suffix, n in (("a", 3), ("b", 5)):
        produce(r, f"{base}:{suffix}", n)
        r.xgroup_create(f"{base}:{suffix}", names["group"], "0")
    produce(r, f"{base}:a:dlq", 2)  # a's dead letters: matched, but not a source
    out = _cli("--url", redis_server.url, "status", "--stream-pattern", f"{base}:*", "--json")
    assert out.returncode == 0, out.stderr
    js = json.loads(out.stdout)
    assert [x["stream"] for x in js] == [f"{base}:a", f"{base}:b"]
    assert [x["groups"][0]["lag"] for x in js] == [3, 5]
    assert [x["dead_letter_length"] for x in js] == [2, 0]
    text = _cli("--url", redis_server.url, "status", "--stream-pattern", f"{base}:*").stdout
    assert text.startswith(f"2 streams match '{base}:*' (and 1 dead-letter streams")
    assert f"dead-letter stream {base}:a:dlq: 2 entries" in text
    assert f"stream {base}:a:dlq:" not in text.replace(f"dead-letter stream {base}:a:dlq", "")
    # a page of the streams, by name (the full per-stream table of a query over thousands)
    page = _cli("--url", redis_server.url, "status", "--stream-pattern", f"{base}:*", "--json",
                "--offset", "1", "--limit", "1")
    assert [x["stream"] for x in json.loads(page.stdout)] == [f"{base}:b"], page.stderr
    text = _cli("--url", redis_server.url, "status", "--stream-pattern", f"{base}:*",
                "--limit", "1").stdout
    assert text.startswith(f"2 streams match '{base}:*'") and "; streams 1-1 by name" in text


def test_status_reads_each_group_s_consumers_once(redis_server, names):
    r = redis_server.client()
    produce(r, names["stream"], 3)
    for g in ("g1", "g2"):
        r.xgroup_create(names["stream"], g, "0")
        r.xreadgroup(g, "worker", {names["stream"]: ">"}, count=1)

    def calls() -> int:
        return int(r.info("commandstats").get("cmdstat_xinfo|consumers", {}).get("calls", 0))

    before = calls()
    assert _cli("--url", redis_server.url, "status", "--stream", names["stream"]).returncode == 0
    assert calls() - before == 2  # one per group


def test_trimming_a_stream_that_does_not_exist_says_so_and_fails(redis_server, names):
    for extra in ([], ["--dry-run"], ["--json"]):
        out = _cli("--url", redis_server.url, "stream", "trim", "--stream", names["stream"],
                   *extra)
        assert out.returncode == 1, out
        assert f"stream {names['stream']!r} does not exist" in out.stderr
        assert out.stderr.count("\n") == 1 and not out.stdout


def test_the_password_can_come_from_the_environment(own_redis, names):
    """The command a DataLossError prints names no password: the CLI reads it from
    EVENTBUS_PASSWORD when --password is not given."""
    own_redis.password = "s3cret-pw"
    own_redis.start()
    produce(own_redis.client(), names["stream"], 3)
    args = ("--url", own_redis.url, "status", "--stream", names["stream"], "--json")
    env = {k: v for k, v in os.environ.items() if k != "EVENTBUS_PASSWORD"}
    refused = subprocess.run([sys.executable, "-m", "spark_eventbus", *args],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "refused the credentials" in refused.stderr
    ok = subprocess.run([sys.executable, "-m", "spark_eventbus", *args], capture_output=True,
                        text=True, timeout=60, env={**env, "EVENTBUS_PASSWORD": "s3cret-pw"})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["length"] == 3
