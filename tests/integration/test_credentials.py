"""Credentials that rotate (issue 39): an ACL user's password is replaced every few seconds —
the new one added, the old one removed after a short grace and the user's connections killed,
as a managed Redis does when a token expires — while one streaming query reads (reader), writes
what it read through the sink, and acks through an ``AckingBatchWriter``. With ``passwordFile``
and with a ``credentialProvider``: every entry exactly once, nothing pending, no failed batch."""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter, ConfigError
from spark_eventbus.core.connection import connection_spec
from spark_eventbus.ops.cli import main as cli
from spark_eventbus.redisio import client, preflight
from tests.integration import rotating_credentials
from tests.integration.helpers import checkpoint, pending, stream_df, wait_for

pytestmark = pytest.mark.integration

PROVIDER = "tests.integration.rotating_credentials:provider"


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # as a Kubernetes Secret volume swaps its files


# Rotations a query must ride through: counted, not timed (a loaded machine rotates as often).
ROTATIONS = 10


class Rotator:
    """Replaces ``user``'s password on every node of ``admins`` every ``every`` seconds:
    ``ACL SETUSER user >new``, ``publish(new)``, after ``grace`` seconds ``<old`` and
    ``CLIENT KILL USER user``. The grace is what a managed Redis gives (both passwords valid);
    the connections are killed at its end, so each rotation forces every connection of the
    query to authenticate again with the new password."""

    def __init__(self, admins: list[redis.Redis], user: str, publish: Callable[[str], None],
                 every: float = 1.5, grace: float = 0.75) -> None:
        self.admins, self.user, self.publish = admins, user, publish
        self.every, self.grace = every, grace
        self.rotations = 0
        # called before each rotation until it says yes, and after each rotation's kill: the
        # tests pass "the query committed a batch since the last kill", so every rotation lands
        # on a query that came through the one before and is reading
        self.gate: Callable[[], bool] = lambda: True
        self.after: Callable[[], None] = lambda: None
        self.password = secrets.token_hex(8)
        for a in admins:
            a.execute_command("ACL", "SETUSER", user, "reset", "on", f">{self.password}",
                              "~*", "&*", "+@all")
        publish(self.password)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Rotator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.every - self.grace):
            while not self.gate():
                if self._stop.wait(0.05):
                    return
            old, new = self.password, secrets.token_hex(8)
            for a in self.admins:
                a.execute_command("ACL", "SETUSER", self.user, f">{new}")
            self.publish(new)
            self.password = new
            time.sleep(self.grace)
            for a in self.admins:
                a.execute_command("ACL", "SETUSER", self.user, f"<{old}")
                a.execute_command("CLIENT", "KILL", "USER", self.user)
            self.rotations += 1
            self.after()


def _copy_through_rotations(spark: Any, url: str, admin: redis.Redis, rotator: Rotator,
                            names: dict[str, str], tmp_path: Path, **credentials: str) -> None:
    """One query: the reader (``credentials``: options, Sentinel's too) → an AckingBatchWriter
    (the same, as keyword arguments) whose handler writes each batch through the sink (the
    same), through :data:`ROTATIONS` rotations while entries keep coming and at least one batch
    committed between rotations: every entry of the source once in the target, nothing
    pending, the query never failed."""
    source, target, group = names["stream"], f"{names['stream']}:out", names["group"]
    admin.xgroup_create(source, group, "0", mkstream=True)

    def handle(df: Any, _batch_id: int) -> None:
        writer = df.select(F.col("id").alias("src")).write.format("eventbus") \
            .option("url", url).option("stream", target)
        for k, v in credentials.items():
            writer = writer.option(k, v)
        writer.mode("append").save()

    acking = AckingBatchWriter(handle, url=url, group=group, **{
        re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), k): v
        for k, v in credentials.items()})  # the same settings as keyword arguments
    q = (stream_df(spark, url, source, group, maxEntriesPerTrigger=200, **credentials)
         .writeStream.foreachBatch(acking).trigger(processingTime="300 milliseconds")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    produced: list[str] = []
    # the query has started (its first batch, through the first password) before rotations
    admin.xadd(source, {"n": "0"})
    wait_for(lambda: q.exception() is not None or admin.xlen(target) >= 1, timeout=120,
             what="the first batch")
    assert q.exception() is None, q.exception()
    produced.append("")  # the first entry, counted below with the rest

    def last_read() -> int:  # the last batch with input the query has reported
        return max((p["batchId"] for p in q.recentProgress if p["numInputRows"]), default=-1)
    read_at_kill = [-1]

    def after() -> None:
        read_at_kill[0] = last_read()
    rotator.gate = lambda: last_read() > read_at_kill[0]
    rotator.after = after
    deadline = time.monotonic() + 300
    with rotator:
        while rotator.rotations < ROTATIONS:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, f"{rotator.rotations} rotations in 300 s"
            produced += [i.decode() for i in
                         admin.pipeline().xadd(source, {"n": "1"}).xadd(source, {"n": "2"})
                         .execute()]
            time.sleep(0.1)

        def copied() -> bool:
            assert q.exception() is None, q.exception()
            return admin.xlen(target) >= len(produced)
        wait_for(copied, timeout=120, what="every entry copied")
        q.processAllAvailable()  # the last batch's acks
    q.stop()
    assert q.exception() is None, q.exception()
    got = Counter(f[b"src"].decode() for _, f in admin.xrange(target))
    first = admin.xrange(source, count=1)[0][0].decode()
    assert got == Counter([first, *produced[1:]])  # each once: no batch failed and ran again
    assert pending(admin, source, group) == 0


@pytest.mark.server
def test_a_query_reads_writes_and_acks_through_password_file_rotations(
        spark, redis_server, names, tmp_path):
    user = f"rot{names['tag']}"
    secret = tmp_path / "password"
    admin = redis_server.client()
    rotator = Rotator([admin], user, lambda p: _write_atomically(secret, p))
    url = f"redis://{user}@127.0.0.1:{redis_server.port}/0"
    _copy_through_rotations(spark, url, admin, rotator, names, tmp_path,
                            passwordFile=str(secret))


def test_a_query_reads_writes_and_acks_through_credential_provider_rotations(
        spark, redis_server, names, tmp_path):
    user = f"rot{names['tag']}"
    admin = redis_server.client()
    rotator = Rotator([admin], user, lambda p: _write_atomically(
        rotating_credentials.STATE, f"{user}\n{p}\n"))
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    _copy_through_rotations(spark, url, admin, rotator, names, tmp_path,
                            credentialProvider=PROVIDER)


@pytest.mark.server
def test_on_a_cluster_every_node_takes_the_rotating_credentials(
        spark, redis_cluster, names, tmp_path):
    """The same on Redis Cluster (each node has its own ACL: the password is rotated on all of
    them, and every node's connections of the user are killed)."""
    user = f"rot{names['tag']}"
    admins = [n.client() for n in redis_cluster.nodes]
    rotator = Rotator(admins, user, lambda p: _write_atomically(
        rotating_credentials.STATE, f"{user}\n{p}\n"))
    _copy_through_rotations(spark, redis_cluster.url, redis_cluster.client(), rotator, names,
                            tmp_path, credentialProvider=PROVIDER)


@pytest.mark.parametrize("options, says", [
    ({"credentialProvider": "no_such_module_here:make"}, "does not import here"),
    ({"credentialProvider": "tests.integration.rotating_credentials:broken"},
     "calling it raised RuntimeError"),
    ({"credentialProvider": "tests.integration.rotating_credentials:not_a_provider"},
     "not a redis-py CredentialProvider"),
    ({"credentialProvider": "tests.integration.rotating_credentials:failing"},
     "get_credentials() raised RuntimeError"),
    ({"credentialProvider": "not a path"}, "use 'package.module:callable'"),
    ({"passwordFile": "/no/such/password/file"}, "cannot be read"),
    ({"passwordFile": "EMPTY"}, "is empty"),
])
def test_bad_credentials_fail_at_start_naming_the_option_and_ack_nothing(
        spark, redis_server, names, tmp_path, options, says):
    if options.get("passwordFile") == "EMPTY":
        (tmp_path / "empty").write_text("\n")
        options = {"passwordFile": str(tmp_path / "empty")}
    r = redis_server.client()
    r.xadd(names["stream"], {"n": "1"})
    r.xgroup_create(names["stream"], names["group"], "0")
    option = next(iter(options))
    with pytest.raises(Exception) as err:
        q = (stream_df(spark, redis_server.url, names["stream"], names["group"], **options)
             .writeStream.format("noop").option("checkpointLocation", checkpoint(tmp_path))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
    text = str(err.value)
    assert f"option '{option}'" in text and says in text, text[-3000:]
    assert "secret-token" not in text  # what a provider says is never shown
    assert r.xinfo_groups(names["stream"])[0]["last-delivered-id"] == b"0-0"  # nothing read
    arg = "credential_provider" if option == "credentialProvider" else "password_file"
    with pytest.raises(ConfigError) as aw:  # the AckingBatchWriter takes the same options
        w = AckingBatchWriter(lambda df, i: None, url=redis_server.url, group="g",
                              **{arg: options[option]})
        preflight(w.spec)
    assert f"option '{option}'" in str(aw.value) and says in str(aw.value), str(aw.value)


@pytest.mark.server
def test_the_cli_takes_a_password_file(redis_server, names, tmp_path, capsys):
    user = f"cli{names['tag']}"
    r = redis_server.client()
    r.execute_command("ACL", "SETUSER", user, "on", ">first", "~*", "&*", "+@all")
    secret = tmp_path / "pw"
    secret.write_text("first\n")
    r.xadd(names["stream"], {"n": "1"})
    url = f"redis://{user}@127.0.0.1:{redis_server.port}/0"
    assert cli(["--url", url, "--password-file", str(secret), "status", "--stream",
                names["stream"], "--group", "none"]) in (0, 1)
    assert "refused the credentials" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        cli(["--url", redis_server.url, "--credential-provider", "nope", "status", "--stream",
             names["stream"]])
    assert bad.value.code == 2
    assert "--credential-provider = 'nope' is invalid" in capsys.readouterr().err


@pytest.mark.server
def test_a_streaming_provider_reauthenticates_live_connections(redis_server, names):
    """New credentials announced by a streaming provider: redis-py re-authenticates the
    pool's connections with them (AUTH on each), which are kept — the same client IDs."""
    from tests.integration.rotating_credentials import Streaming
    user = f"st{names['tag']}"
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", user, "on", ">one", ">two", "~*", "&*", "+@all")
    Streaming.reset(user, "one")
    spec = connection_spec(f"redis://127.0.0.1:{redis_server.port}/0",
                           credential_provider="tests.integration.rotating_credentials:streaming")
    r = client(spec)
    assert r.ping()

    def ids() -> set[str]:
        return {c["id"] for c in admin.client_list() if c.get("user") == user}
    before = ids()
    auths = int(admin.info("commandstats").get("cmdstat_auth", {}).get("calls", 0))
    Streaming.announce("two")
    admin.execute_command("ACL", "SETUSER", user, "<one")
    assert r.ping()
    wait_for(lambda: int(admin.info("commandstats").get("cmdstat_auth", {}).get("calls", 0))
             > auths, timeout=30, what="a re-AUTH")
    assert ids() == before  # kept, not dropped
    assert r.set(f"{names['tag']}:k", "v")


def test_a_password_file_missing_for_a_moment_is_waited_for_on_a_new_connection(
        redis_server, names, tmp_path):
    """A Secret rewritten in place can be absent for a moment: a new connection (made by the
    pool, outside the command's retry) waits for it within the window instead of failing."""
    user = f"mo{names['tag']}"
    redis_server.client().execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "+@all")
    secret = tmp_path / "pw"
    secret.write_text("pw")
    spec = connection_spec(f"redis://{user}@127.0.0.1:{redis_server.port}/0",
                           password_file=str(secret), failover_timeout_ms=20_000)
    r = client(spec)
    assert r.ping()
    r.connection_pool.disconnect()  # the next command makes a new connection
    secret.rename(tmp_path / "away")
    threading.Timer(1.0, lambda: (tmp_path / "away").rename(secret)).start()
    started = time.monotonic()
    assert r.set(f"{names['tag']}:k", "v")
    assert time.monotonic() - started >= 0.5  # it did wait for the file
