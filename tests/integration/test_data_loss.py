"""Entries a replayed batch no longer finds (issue 28): a failover to a replica that missed the
tail of a claimed range, deletions spread over ranges, partitions and reclaimed IDs, the exact
count in the error, ``eventbus status``, ``eventbus group accept-loss`` and
``failOnDataLoss=false``."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_eventbus import DataLossError
from spark_eventbus.core.keys import loss_key
from spark_eventbus.core.offsets import BatchOffset
from spark_eventbus.group.stream_reader import EventBusStreamReader
from spark_eventbus.ops.cli import main as cli
from tests.harness.redis_server import RedisServer
from tests.integration.helpers import (
    checkpoint,
    driver_reader,
    latest_offsets,
    pending,
    produce,
    stream_df,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _read(reader: EventBusStreamReader, start: dict, end: dict) -> list[str]:
    return [i for p in reader.partitions(start, end) for b in reader.read(p)
            for i in b.column("id").to_pylist()]


def _status(url: str, stream: str, group: str, capsys: pytest.CaptureFixture[str]
            ) -> tuple[str, dict[str, Any]]:
    assert cli(["--url", url, "status", "--stream", stream, "--group", group]) == 0
    text = capsys.readouterr().out
    assert cli(["--url", url, "status", "--stream", stream, "--group", group, "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


@pytest.fixture
def primary_and_replica(tmp_path: Path) -> Any:
    servers = [RedisServer(tmp_path / "primary"), RedisServer(tmp_path / "replica")]
    try:
        yield [s.start() for s in servers]
    finally:
        for s in servers:
            s.stop()


def test_failover_to_a_replica_that_missed_the_tail_of_a_batch(primary_and_replica, capsys):
    """The issue's run, reduced: a batch of 500 claimed on the primary, of which the replica
    had received 50 when it was promoted. Its replay there names exactly the 450 missing; the
    operator's accept-loss lets that one replay move past them; they are counted once."""
    primary, replica = primary_and_replica
    p, rep = primary.client(), replica.client()
    stream, group = f"orders{uuid.uuid4().hex[:6]}", "billing"
    p.xgroup_create(stream, group, "0", mkstream=True)
    p.config_set("repl-diskless-sync-delay", 0)  # sync at once (default: wait 5 s)
    rep.replicaof("127.0.0.1", primary.port)
    received = produce(p, stream, 50)
    wait_for(lambda: rep.exists(stream) and rep.xlen(stream) == 50, 30, "the replica to sync")
    rep.replicaof("no", "one")  # cut off: it never receives what follows, then is promoted
    never_replicated = produce(p, stream, 450, 50)

    old = driver_reader(primary.url, stream, group, maxEntriesPerTrigger="500",
                        numPartitions="1")
    start = old.initialOffset()
    end = old.latestOffset(start, ReadMaxRows(500))  # logged by Spark, never committed
    old.stop()
    chunks = BatchOffset.from_json(end).streams[stream].chunks
    assert [(c.first, c.last, c.count) for c in chunks] == [
        (received[0], never_replicated[-1], 500)]

    # The query restarted from its checkpoint on the promoted replica replays that batch.
    new = driver_reader(replica.url, stream, group, maxEntriesPerTrigger="500",
                        numPartitions="1")
    with pytest.raises(DataLossError) as err:
        _read(new, start, end)
    text = str(err.value)
    assert text.startswith(f"450 entries of stream '{stream}' that batch 1 of this query "
                           "claimed (group 'billing', consumer 'spark-billing') are no longer "
                           f"in the stream, in 1 range: [{received[0]}, {never_replicated[-1]}]"
                           ": 450 of 500.")
    assert "a failover to a replica that had not received them" in text
    # a command that can be pasted as it stands
    assert f"run `eventbus --url {replica.url} group accept-loss --stream {stream} --group " \
        "billing` and restart" in text
    with pytest.raises(DataLossError):  # every replay stops on it until someone acts
        _read(new, start, end)

    shown, js = _status(replica.url, stream, group, capsys)
    assert ("STOPPED on lost entries since 20" in shown
            and "batch 1 of consumer spark-billing: 450 entries no longer in the stream, in 1 "
                f"range: [{received[0]}, {never_replicated[-1]}]: 450 of 500" in shown)
    assert f"eventbus group accept-loss --stream {stream} --group billing" in shown
    [rec] = js["groups"][0]["stopped_on_lost_entries"]
    assert (rec["batch"], rec["missing"], rec["accepted"]) == (1, 450, False)

    assert cli(["--url", replica.url, "group", "accept-loss", "--stream", stream,
                "--group", group]) == 0
    assert (f"Accepted the loss of 450 entries of stream '{stream}' in batch 1 (consumer "
            "'spark-billing')") in capsys.readouterr().out
    assert "accepted: the query's next replay" in _status(replica.url, stream, group, capsys)[0]
    assert cli(["--url", replica.url, "group", "accept-loss", "--stream", stream,
                "--group", group]) == 1
    assert "already accepted" in capsys.readouterr().err

    assert _read(new, start, end) == received  # the accepted replay moves past them
    assert _read(new, start, end) == received  # a task retry does too
    produced_after = produce(rep, stream, 100, 500)  # the producer, on the new primary
    nxt = new.latestOffset(end, ReadMaxRows(500))  # batch 1 committed: counted, record gone
    again = _read(new, end, nxt)
    nxt2 = new.latestOffset(nxt, ReadMaxRows(500))
    assert nxt2 is nxt
    lost = new.reportLatestOffset()["_eventbus"]
    assert (lost["lostEntries"], lost["lostRanges"]) == (450, 1)
    assert rep.exists(loss_key(stream, group, "spark-billing")) == 0
    # The replica had the 50 entries but not the claim: they come again (at-least-once).
    assert again == received + produced_after
    assert "STOPPED" not in _status(replica.url, stream, group, capsys)[0]
    new.stop()
    assert pending(rep, stream, group) == 0


def _scattered_losses(r: Any, url: str, stream: str, group: str, **opts: str
                      ) -> tuple[EventBusStreamReader, dict, dict, list[str], set[str]]:
    """A batch of 20 reclaimed IDs and two claimed ranges of 510 and 490 (two partitions), then
    deletions in all three before its replay: 3 reclaimed IDs, 100 entries of the first range
    (40 of them moved to another consumer's pending list first) and the last 30 of the second.
    Returns the reader, the batch, the IDs and the IDs deleted."""
    ids = produce(r, stream, 1_020)
    r.xgroup_create(stream, group, "0")
    r.xreadgroup(group, "dead-worker", {stream: ">"}, count=20)  # reclaimed below
    time.sleep(0.25)
    reader = driver_reader(url, stream, group,
                           maxEntriesPerTrigger="1020", numPartitions="2",
                           claimMinIdleMs="200", **opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(1_020))
    batch = BatchOffset.from_json(end).streams[stream]
    assert [i for i, _ in batch.reclaimed] == ids[:20]
    assert [(c.first, c.last, c.count) for c in batch.chunks] == [
        (ids[20], ids[529], 510), (ids[530], ids[1019], 490)]
    r.xclaim(stream, group, "other", 0, ids[100:140])  # pending elsewhere, then deleted
    deleted = ids[3:6] + ids[100:200] + ids[990:1020]
    r.xdel(stream, *deleted)
    return reader, start, end, ids, set(deleted)


def test_the_count_is_exact_over_ranges_partitions_reclaimed_ids_and_other_consumers(
        redis_server, names, capsys):
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    reader, start, end, ids, _ = _scattered_losses(r, redis_server.url, stream, group)
    errors = []
    for part in reader.partitions(start, end):
        with pytest.raises(DataLossError) as err:
            list(reader.read(part))
        errors.append(str(err.value))
    # pack_partitions: one range each, the 20 reclaimed IDs on the lighter bin (the second)
    assert errors[0].startswith(f"100 entries of stream '{stream}' that batch 1 of this query "
                                f"claimed (group '{group}', consumer 'spark-{group}') are no "
                                f"longer in the stream, in 1 range: [{ids[20]}, {ids[529]}]: "
                                "100 of 510.")
    assert errors[1].startswith(f"33 entries of stream '{stream}'")
    assert (f"in 4 ranges: [{ids[530]}, {ids[1019]}]: 30 of 490; reclaimed ID {ids[3]}; "
            f"reclaimed ID {ids[4]}; reclaimed ID {ids[5]}.") in errors[1]
    _, js = _status(redis_server.url, stream, group, capsys)
    [rec] = js["groups"][0]["stopped_on_lost_entries"]
    assert rec["missing"] == 133 and len(rec["ranges"]) == 5
    reader.stop()


def test_failondataloss_false_skips_counts_and_acks_them_and_the_rest_flows(redis_server, names):
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    reader, start, end, ids, deleted = _scattered_losses(r, redis_server.url, stream, group,
                                                         failOnDataLoss="false")
    got = _read(reader, start, end)
    assert sorted(got) == sorted(set(ids) - deleted)
    more = produce(r, stream, 10, 2_000)
    nxt = reader.latestOffset(end, ReadMaxRows(1_020))
    assert _read(reader, end, nxt) == more
    assert reader.latestOffset(nxt, ReadMaxRows(1_020)) is nxt
    counted = reader.reportLatestOffset()["_eventbus"]
    assert (counted["lostEntries"], counted["lostRanges"]) == (133, 5)
    reader.stop()
    # the deleted entries are acked too, also the 40 another consumer held
    assert pending(r, stream, group) == 0
    assert r.exists(loss_key(stream, group, f"spark-{group}")) == 0


def test_an_acceptance_covers_only_the_entries_recorded(redis_server, names, capsys):
    """Accepted: 100 missing in the first range. Deleting more there before the replay stops it
    again; the new figure needs its own acceptance."""
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    reader, start, end, ids, _ = _scattered_losses(r, redis_server.url, stream, group)
    first = reader.partitions(start, end)[0]
    with pytest.raises(DataLossError):
        list(reader.read(first))
    assert cli(["--url", redis_server.url, "group", "accept-loss", "--stream", stream,
                "--group", group, "--batch", "1"]) == 0
    r.xdel(stream, ids[300])
    with pytest.raises(DataLossError) as err:
        list(reader.read(first))
    assert ": 101 of 510." in str(err.value)
    assert cli(["--url", redis_server.url, "group", "accept-loss", "--stream", stream,
                "--group", group, "--consumer", f"spark-{group}"]) == 0
    assert "Accepted the loss of 101 entries" in capsys.readouterr().out
    assert len(list(reader.read(first))) > 0
    # The second partition never failed: its loss is not accepted, it stops the batch.
    with pytest.raises(DataLossError):
        list(reader.read(reader.partitions(start, end)[1]))
    reader.stop()


@pytest.mark.parametrize("fail", [True, False])
def test_entries_deleted_while_a_dead_worker_held_them_are_counted_once(redis_server, names,
                                                                        fail):
    """Found by the reclaim (XAUTOCLAIM drops them from the PEL), not by a replay: counted
    there, each entry once; entries of the query's own planned batches are left to its
    replay (test_failondataloss_false_skips_counts_and_acks_them_and_the_rest_flows)."""
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    ids = produce(r, stream, 10)
    r.xgroup_create(stream, group, "0")
    r.xreadgroup(group, "dead-worker", {stream: ">"}, count=10)
    r.xdel(stream, *ids[2:6])
    time.sleep(0.25)
    reader = driver_reader(redis_server.url, stream, group, claimMinIdleMs="200",
                           failOnDataLoss=str(fail).lower())
    start = reader.initialOffset()
    if fail:
        with pytest.raises(DataLossError, match=r"^4 pending entries"):
            reader.latestOffset(start, ReadMaxRows(100))
        reader.stop()
        return
    end = reader.latestOffset(start, ReadMaxRows(100))
    got = _read(reader, start, end)
    assert len(got) == 6 and set(got) == set(ids[:2] + ids[6:])
    counted = reader.reportLatestOffset()["_eventbus"]
    assert (counted["lostEntries"], counted["lostRanges"]) == (4, 1)
    reader.stop()


# -- the operator's way through Spark ------------------------------------------------------------

def _run(df: DataFrame, chk: str, got: list[str]) -> StreamingQuery:
    def collect(batch: DataFrame, _: int) -> None:
        got.extend(row["id"] for row in batch.select("id").collect())

    q = (df.writeStream.foreachBatch(collect).trigger(availableNow=True)
         .option("checkpointLocation", chk).start())
    with contextlib.suppress(StreamingQueryException):  # the test looks at q.exception()
        q.awaitTermination(300)
    return q


def _lose_the_tail_of_the_last_batch(spark: Any, redis_server: RedisServer,
                                     names: dict[str, str], tmp_path: Path
                                     ) -> tuple[str, list[str], list[str]]:
    """Two batches of 300 run and commit; the last is made uncommitted again (its commit log
    entry removed, as if the driver died before writing it), its last 120 entries are deleted,
    and 200 more are produced behind it. Returns the checkpoint, the IDs its replay still finds
    and the 200."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 600)
    chk = checkpoint(tmp_path)
    got: list[str] = []
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=300)
    q = _run(df, chk, got)
    assert q.exception() is None and sorted(got) == sorted(ids)
    last = max(int(f.name) for f in Path(chk, "commits").iterdir() if f.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        Path(chk, "commits", name).unlink()
    r.xdel(names["stream"], *ids[480:])
    return chk, ids[300:480], produce(r, names["stream"], 200, 600)


def test_a_query_stopped_on_lost_entries_moves_past_them_once_accepted(
        spark, redis_server, names, tmp_path, capsys):
    chk, kept, behind = _lose_the_tail_of_the_last_batch(spark, redis_server, names, tmp_path)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=100)
    q = _run(df, chk, [])
    assert q.exception() is not None
    text = str(q.exception())
    assert f"120 entries of stream '{names['stream']}' that batch 2 of this query" in text
    assert ": 120 of 150." in text and "group accept-loss" in text  # chunks of 150
    shown, _ = _status(redis_server.url, names["stream"], names["group"], capsys)
    assert "STOPPED on lost entries" in shown and "batch 2 of consumer" in shown
    assert cli(["--url", redis_server.url, "group", "accept-loss", "--stream", names["stream"],
                "--group", names["group"]]) == 0
    got: list[str] = []
    q = _run(df, chk, got)
    assert q.exception() is None
    assert sorted(got) == sorted(kept + behind)  # the rest flows, nothing twice
    counted = [o["_eventbus"] for o in latest_offsets(q)]
    assert max(c["lostEntries"] for c in counted) == 120
    r = redis_server.client()
    assert pending(r, names["stream"], names["group"]) == 0
    assert r.exists(loss_key(names["stream"], names["group"], f"spark-{names['group']}")) == 0


def test_failondataloss_false_moves_past_a_replayed_loss_in_spark(spark, redis_server, names,
                                                                  tmp_path):
    chk, kept, behind = _lose_the_tail_of_the_last_batch(spark, redis_server, names, tmp_path)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=100, failOnDataLoss="false")
    got: list[str] = []
    q = _run(df, chk, got)
    assert q.exception() is None
    assert sorted(got) == sorted(kept + behind)
    counted = [o["_eventbus"] for o in latest_offsets(q)]
    assert max(c["lostEntries"] for c in counted) == 120
    assert pending(redis_server.client(), names["stream"], names["group"]) == 0
