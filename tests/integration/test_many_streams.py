"""Many small streams in one query: tasks follow numPartitions and the data, not the stream
count; every entry exactly once (exact replay of packed batches across driver kills:
test_faults.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_eventbus.core.keys import batch_key, key_slot
from spark_eventbus.core.offsets import BatchOffset
from spark_eventbus.core.planning import MIN_SHARE
from tests.integration.helpers import (
    driver_reader,
    pending,
    produce,
    run_available_now,
    stream_df,
    wait_for,
)

pytestmark = pytest.mark.integration


def _many(r: redis.Redis, prefix: str, streams: int, each: int) -> tuple[list[str], set[str]]:
    names = [f"{prefix}-{i:03d}" for i in range(streams)]
    ids = set()
    for i, name in enumerate(names):
        ids |= {f"{name}/{x}" for x in produce(r, name, each, i * each)}
    return names, ids


@pytest.mark.server
def test_many_small_streams_make_num_partitions_tasks_and_every_entry_once(
        redis_server, names):
    r = redis_server.client()
    streams, produced = _many(r, names["stream"], 200, 3)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"],
                           numPartitions="3")
    start = reader.initialOffset()
    got: list[str] = []
    tasks = []
    for limit in (ReadMaxRows(400), ReadAllAvailable()):
        end = reader.latestOffset(start, limit)
        parts = reader.partitions(start, end)
        tasks.append(len(parts))
        counts = sorted(sum(sl.count for sl in p.slices) for p in parts)
        assert counts[-1] - counts[0] <= 3  # balanced by entries: chunks of 3 at most here
        for part in parts:
            for rb in reader.read(part):
                got += [f"{s}/{i}" for s, i in zip(rb.column("stream").to_pylist(),
                                                   rb.column("id").to_pylist(), strict=True)]
        reader.commit(end)
        start = end
    assert tasks == [3, 3]  # not 200 (one per stream, as before packing)
    assert len(got) == len(produced) and set(got) == produced
    assert reader.latestOffset(start, ReadAllAvailable()) is start  # acks the last batch
    reader.stop()
    assert all(pending(r, s, names["group"]) == 0 for s in streams)


def test_many_streams_in_a_spark_query_deliver_every_entry_once(spark, redis_server, names,
                                                                  tmp_path):
    r = redis_server.client()
    streams, produced = _many(r, names["stream"], 60, 4)
    df = stream_df(spark, redis_server.url, ",".join(streams), names["group"],
                   maxEntriesPerTrigger=100)
    rows, q = run_available_now(df, tmp_path)
    got = [f"{row.stream}/{row.id}" for row in rows]
    assert len(got) == len(produced) and set(got) == produced
    ends = [BatchOffset.from_json(json.loads(p["sources"][0]["endOffset"]))
            for p in q.recentProgress if p["sources"][0]["endOffset"]]
    # Offsets list the streams with entries in the batch only, each of them non-empty.
    assert all(all(b.count for b in o.streams.values()) for o in ends)
    assert sum(o.count for o in ends) >= len(produced)


def test_a_packed_batch_is_replayed_and_a_restart_reads_exactly_the_rest(spark, redis_server,
                                                                        names, tmp_path):
    """From PACK_FROM streams in a batch on, its offset is packed (v 3): a query whose first
    batch fails after Spark logged it replays that batch from the packed offset in a new
    query; more arrives in every ninth stream and a restart reads exactly that, each entry
    once, nothing left pending. (Written-out offsets: every other test here.)"""
    from spark_eventbus.core.offsets import PACK_FROM, PACKED

    r = redis_server.client()
    streams = [f"{names['stream']}:{i:05d}" for i in range(PACK_FROM)]
    logged, produced, (first, run), written = _fail_once_then_replay(
        spark, r, redis_server.url, streams, names["group"], tmp_path)
    assert logged["v"] == PACKED and logged["count"] == PACK_FROM
    assert len(json.dumps(logged)) < 20 * PACK_FROM  # written out: ~45 bytes per stream
    assert first == len(produced)  # the replay, from the packed offset in the log
    produced |= _add(r, streams[::9])
    assert run() == len(streams[::9])
    got = written()
    assert len(got) == len(produced) and set(got) == produced
    assert sum(pending(r, s, names["group"]) for s in streams) == 0


def _add(r: redis.Redis, streams: list[str]) -> set[str]:
    """One more entry in each of ``streams``; their `stream/id`s."""
    pipe = r.pipeline(transaction=False)
    for st in streams:
        pipe.xadd(st, {"n": "1"})
    return {f"{st}/{i.decode()}" for st, i in zip(streams, pipe.execute(), strict=True)}


def _fail_once_then_replay(spark: Any, r: redis.Redis, url: str, streams: list[str], group: str,
                       tmp_path: Any, between: Any = None, **options: Any
                       ) -> tuple[dict[str, Any], set[str], list[str], Any]:
    """One entry in each of ``streams``; a query whose first batch (every stream) fails once
    after Spark logged it; ``between`` runs before the same query runs it again. Returns the
    logged offset, the entries produced, what the run again returned (rows, or its error) and
    ``run`` to run the query again (on another checkpoint if given), and ``written``: the
    rows written (once per row)."""
    from pathlib import Path

    import pyarrow.parquet as pq
    from pyspark.errors import StreamingQueryException

    produced = _add(r, streams)
    out, chk = tmp_path / f"out-{group}", str(tmp_path / f"chk-{group}")
    failed: list[int] = []

    def write(df: Any, batch_id: int) -> None:
        if not failed:  # the first attempt of the first batch fails, after Spark logged it
            failed.append(batch_id)
            raise RuntimeError("the sink failed once")
        df.select("stream", "id").write.mode("append").parquet(str(out / str(batch_id)))

    def run(checkpoint: str = chk) -> Any:
        df = stream_df(spark, url, ",".join(streams), group, **options)
        q = (df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        try:
            assert q.awaitTermination(300)
        except StreamingQueryException as exc:
            return exc
        return sum(p["numInputRows"] for p in q.recentProgress)

    assert "the sink failed once" in str(run())  # batch 0 logged, not committed
    logged = json.loads((Path(chk) / "offsets" / "0").read_text().splitlines()[-1])
    if between is not None:
        between(logged)
    first = run()

    def written() -> list[str]:
        return [f"{s}/{i}" for s, i in zip(*pq.read_table(out).to_pydict().values(),
                                            strict=True)]
    return logged, produced, [first, run], written  # type: ignore[return-value]


NAMED_STREAMS = 5_000  # ~21 KB of packed contents (one entry each): over offsets.NAME_FROM


@pytest.mark.server
@pytest.mark.parametrize("where", ["redis_server", "redis_cluster"])
def test_a_batch_its_offset_names_is_replayed_and_a_restart_reads_exactly_the_rest(
        spark, request, where, names, tmp_path):
    """From NAME_FROM bytes of packed contents on, a batch's offset names it (v 4) and its
    contents are kept in Redis: Spark's offset log holds a few hundred bytes for 5,000
    streams; the batch, failed after Spark logged it, is run again from the kept contents;
    more in every ninth stream is read exactly by a restart; each entry once, nothing
    pending, and no kept contents left but the last committed batch's. On one node and on a
    cluster (the contents in the first stream's slot)."""
    from spark_eventbus.core.offsets import NAME_FROM, NAMED

    redis_server = request.getfixturevalue(where)
    r = redis_server.client()
    streams = [f"{names['stream']}:{i:05d}" for i in range(NAMED_STREAMS)]
    kept: list[int] = []

    def contents(logged: dict[str, Any]) -> None:  # kept before Spark logged the offset
        raw = r.get(batch_key(logged["at"], names["group"], f"spark-{names['group']}",
                              logged["run"], logged["seq"]))
        kept.append(-1 if raw is None else len(raw))

    logged, produced, (first, run), written = _fail_once_then_replay(
        spark, r, redis_server.url, streams, names["group"], tmp_path, contents)
    assert logged["v"] == NAMED and logged["count"] == NAMED_STREAMS
    assert logged["entries"] == NAMED_STREAMS and len(json.dumps(logged)) < 400
    assert kept[0] >= NAME_FROM
    assert first == NAMED_STREAMS  # the replay, from the contents the offset names
    produced |= _add(r, streams[::9])
    assert run() == len(streams[::9])
    got = written()
    assert len(got) == len(produced) and set(got) == produced
    assert sum(pending(r, s, names["group"]) for s in streams) == 0
    left = list(r.scan_iter(match=f"*:eventbus:batch:*{names['group']}*", count=10_000))
    assert len(left) <= 1, left  # the last committed batch's, until the next close


@pytest.mark.server
@pytest.mark.parametrize("plans_too", [False, True], ids=["rebuilt from the plans", "gone"])
def test_a_named_batch_whose_contents_are_gone_is_rebuilt_or_stops_losing_nothing(
        spark, redis_server, names, tmp_path, plans_too):
    """The contents a logged batch's offset names are deleted before Spark runs it again:
    rebuilt exactly from the batch's claim plans (each entry once); with the plans gone too,
    the query stops saying so and naming the fix (a new checkpointLocation), and a query on
    a new checkpoint reads every entry (reclaimed: nothing lost)."""
    from spark_eventbus.core.keys import plan_key

    r = redis_server.client()
    group = names["group"]
    consumer = f"spark-{group}"
    streams = [f"{names['stream']}:{i:05d}" for i in range(NAMED_STREAMS)]

    def lose(logged: dict[str, Any]) -> None:
        assert r.delete(batch_key(logged["at"], group, consumer, logged["run"],
                                  logged["seq"])) == 1
        if plans_too:
            pipe = r.pipeline(transaction=False)
            for st in streams:
                pipe.hdel(plan_key(st, group, consumer), str(logged["seq"]))
            assert sum(pipe.execute()) == NAMED_STREAMS

    _, produced, (first, run), written = _fail_once_then_replay(
        spark, r, redis_server.url, streams, group, tmp_path, lose, claimMinIdleMs=1000)
    if not plans_too:
        assert first == NAMED_STREAMS
    else:
        assert "they are gone" in str(first) and "new checkpointLocation" in str(first)
        assert run(str(tmp_path / "chk-new")) == NAMED_STREAMS  # reclaimed after 1 s
    got = written()
    assert len(got) == len(produced) and set(got) == produced
    assert sum(pending(r, s, group) for s in streams) == 0


def _calls(r: redis.Redis, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.server
def test_quiet_streams_are_not_claimed_from_and_progress_is_one_round_of_pipelines(
        redis_server, names):
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 100, 1)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"])
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(end)
    assert reader.latestOffset(end, ReadAllAvailable()) is end  # all quiet now
    produce(r, streams[42], 5)
    before = {c: _calls(r, c) for c in ("xreadgroup", "evalsha", "xautoclaim")}
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert list(BatchOffset.from_json(nxt).streams) == [streams[42]]
    report = reader.reportLatestOffset()
    assert report[streams[42]]["claimed"] == 5 and report[streams[0]]["pending"] == 0
    spent = {c: _calls(r, c) - n for c, n in before.items()}
    # One stream has news: its claim only (was: a claim script, an XREADGROUP and a record
    # per stream, 100 streams); reclaim asks only the stream with pending entries.
    assert spent["xreadgroup"] == 1, spent
    assert spent["evalsha"] <= 6, spent
    reader.stop()


def _all_calls(r: redis.Redis) -> int:
    """Commands Redis has run, script-internal ones included (INFO itself not counted)."""
    return sum(int(v["calls"]) for k, v in r.info("commandstats").items()
               if k != "cmdstat_info")


def test_acks_move_the_probed_pending_count_only_where_that_follows(redis_server, names):
    """ProbeCache.acked: n acked come off the probed pending count; the stream is probed again
    instead where a probe that read group states began after the acks were sent (it may have
    seen them; a claim likewise), where the pending count is unknown, and where the acks delete
    the entries (XACKDEL). A probe that asked no stream changes nothing."""
    from dataclasses import replace

    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 4, 3)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"])
    start = reader.initialOffset()
    reader.latestOffset(start, ReadAllAvailable())
    reader.driver.prefetch.join()
    cache = reader.driver.claimer.probes
    a, b, c, d = streams
    assert all(cache.probed[s].pending == 3 for s in streams) and not cache.dirty
    since = cache.generation()
    cache.probe()  # nothing new, nothing marked: no stream asked
    cache.acked({a: 2}, since)
    assert cache.probed[a].pending == 1 and a not in cache.dirty
    cache.touched([b])
    cache.probe()  # b asked: a probe began after `since`, and may have seen the acks
    cache.acked({b: 1}, since)
    assert b in cache.dirty and cache.probed[b].pending == 3
    cache.claimed(a, 1, "9999999999999-0", since)
    assert a in cache.dirty
    cache.probed[c] = replace(cache.probed[c], pending=None)
    cache.acked({c: 1}, cache.generation())
    assert c in cache.dirty
    cache.ops[d].delete_acked = True
    cache.acked({d: 1}, cache.generation())
    assert d in cache.dirty
    reader.stop()


def test_news_over_2500_streams_is_three_bounded_xreads_in_one_round_trip(redis_server,
                                                                          names):
    """probes.news: an XREAD COUNT 1 per NEWS_PER_XREAD streams (no one command over all of
    them, which at 100,000 streams holds the server ~140 ms), all pipelined; exactly the
    streams with an entry after the given ID are named, a missing stream has none."""
    from spark_eventbus.core.connection import ConnectionSpec
    from spark_eventbus.redisio import ConsumerOps
    from spark_eventbus.redisio.probes import NEWS_PER_XREAD, news

    r = redis_server.client()
    n = 2 * NEWS_PER_XREAD + 500
    streams = [f"{names['stream']}-{i:04d}" for i in range(n)]
    pipe = r.pipeline(transaction=False)
    for s in streams[:-1]:  # the last one does not exist
        pipe.xadd(s, {"n": "0"}, id="5-1")
    pipe.execute()
    with_news = set(streams[7:n - 1:97])
    pipe = r.pipeline(transaction=False)
    for s in with_news:
        pipe.xadd(s, {"n": "1"}, id="9-1")
    pipe.execute()
    spec = ConnectionSpec(redis_server.url)
    ops = [ConsumerOps(spec, s, names["group"], "c") for s in streams]
    xreads = _calls(r, "xread")
    assert news(ops, ["5-1"] * n) == with_news
    assert _calls(r, "xread") - xreads == 3
    assert news(ops, ["0-0"] * n) == set(streams[:-1])
    assert news(ops[:1], ["9-1"]) == set()


def test_progress_of_streams_with_a_backlog_asks_no_stream_again(redis_server, names):
    """A batch that takes a share of each of 300 streams with a backlog: the progress report
    that follows shows each group's lag as the planning probe and the claims left it (the
    server's count, XINFO GROUPS), without probing the streams again (no XINFO STREAM of 300
    streams per trigger); a group whose count needs the stream's ends is still looked at."""
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 300, 40)
    budget = 300 * MIN_SHARE  # the smallest share each: every stream gets some
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"],
                           maxEntriesPerTrigger=str(budget))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(budget))
    assert {b.count for b in BatchOffset.from_json(end).streams.values()} == {MIN_SHARE}
    assert len(BatchOffset.from_json(end).streams) == 300
    reader.driver.prefetch.join()  # the next batch's pre-claim: done, Redis holds still
    before = (_calls(r, "xinfo|stream"), _calls(r, "xinfo|groups"))
    report = reader.reportLatestOffset()
    assert (_calls(r, "xinfo|stream"), _calls(r, "xinfo|groups")) == before
    pipe = r.pipeline(transaction=False)
    for s in streams:
        pipe.xinfo_groups(s)
    groups = {s: g[0] for s, g in zip(streams, pipe.execute(), strict=True)}
    assert report["_eventbus"]["entriesBehind"] == sum(int(g["lag"]) for g in groups.values())
    for s in [k for k in report if k != "_eventbus"]:
        # the batch and the next one's pre-claim: MIN_SHARE each
        assert report[s]["entriesBehind"] == int(groups[s]["lag"]) == 40 - 2 * MIN_SHARE
        assert report[s]["pending"] == int(groups[s]["pending"]) == 2 * MIN_SHARE
    reader.stop()


@pytest.mark.server
def test_quiet_triggers_cost_the_same_commands_whatever_the_quiet_streams(redis_server, names):
    """Redis commands per quiet trigger do not grow with quiet streams: one XREAD per 1,000
    streams finds those with news; only they are probed. A stream that gets entries is found at
    the next trigger; every stream is probed again within claimMinIdleMs."""
    r = redis_server.client()
    spent: dict[int, float] = {}
    for n in (40, 400):
        streams, _ = _many(r, f"{names['stream']}-{n}", n, 1)
        reader = driver_reader(redis_server.url, ",".join(streams), names["group"],
                               claimMinIdleMs="600000")
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        xinfo = _calls(r, "xinfo|groups")
        reader.commit(end)  # its acks take their counts off the probed pending lists
        for _ in range(3):
            assert reader.latestOffset(end, ReadAllAvailable()) is end
            report = reader.reportLatestOffset()
        assert _calls(r, "xinfo|groups") == xinfo  # no stream probed again for the acks
        assert all(report[s]["pending"] == 0 for s in report if s != "_eventbus")
        assert report["_eventbus"]["pending"] == 0
        before = _all_calls(r)
        for _ in range(5):
            assert reader.latestOffset(end, ReadAllAvailable()) is end
            report = reader.reportLatestOffset()
        spent[n] = (_all_calls(r) - before) / 5
        assert report[streams[-1]]["pending"] == 0 and report[streams[-1]]["lastDeliveredId"]
        produce(r, streams[7], 3)
        xinfo = _calls(r, "xinfo|groups")
        nxt = reader.latestOffset(end, ReadAllAvailable())
        assert BatchOffset.from_json(nxt).streams[streams[7]].count == 3
        # the stream with news, not all n: its probe, its claim script's (script-internal
        # calls count), and the pre-claim's probe, which may have started already
        assert _calls(r, "xinfo|groups") - xinfo <= 4
        reader.stop()
    assert spent[400] <= spent[40] + 1 and spent[40] <= 10, spent


@pytest.mark.server
def test_a_quiet_streams_loss_without_news_is_seen_within_claim_min_idle(redis_server, names):
    """What XREAD cannot see (entries added and trimmed away before the group read them: no
    new entry left) is seen by the full probe every claimMinIdleMs."""
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 40, 1)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"],
                           claimMinIdleMs="1500", failOnDataLoss="false")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(end)
    for _ in range(2):
        assert reader.latestOffset(end, ReadAllAvailable()) is end
    last = produce(r, streams[3], 4, start=100)[-1]
    r.xtrim(streams[3], minid=f"{int(last.split('-')[0]) + 1}-0")  # all 4 gone, unread

    def reported() -> bool:
        assert reader.latestOffset(end, ReadAllAvailable()) is end
        return reader.reportLatestOffset()["_eventbus"]["lostEntries"] == 4
    wait_for(reported, 30, "the loss on a quiet stream to be reported")
    reader.stop()


@pytest.mark.server
def test_a_query_whose_heartbeat_lapsed_finds_a_takeover_at_its_next_beat(
        redis_server, names, monkeypatch):
    """A stalled query whose heartbeat expired, and whose lease another
    query took meanwhile, finds out at its next beat (it renews every lease at once), not at
    the leases' own renewal minutes later."""
    import spark_eventbus.group.lease as lease_mod
    from spark_eventbus.core.keys import alive_key, lease_key
    from spark_eventbus.errors import ConfigError

    monkeypatch.setattr(lease_mod, "LEASE_RENEW_S", 0.3)
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 40, 1)
    group = names["group"]
    reader = driver_reader(redis_server.url, ",".join(streams), group)
    start = reader.initialOffset()
    lease = reader.driver.lease
    assert r.pttl(lease_key(streams[9], group, f"spark-{group}")) > 60_000
    r.delete(alive_key(lease.owner))  # it lapsed; another query took one lease over
    r.set(lease_key(streams[9], group, f"spark-{group}"), "other-run other-owner", px=60_000)
    wait_for(lambda: lease._lost is not None, 20, "the lapsed query to find the takeover")
    with pytest.raises(ConfigError, match="taken over"):
        reader.latestOffset(start, ReadAllAvailable())
    reader.stop()


@pytest.mark.server
def test_the_lease_refuses_a_second_query_on_any_overlapping_stream(redis_server, names):
    """A live query's leases refuse a second query on any overlapping stream, and a killed
    one's let it in once its driver's heartbeat has expired."""
    from spark_eventbus.core.keys import lease_key
    from spark_eventbus.errors import ConfigError
    from spark_eventbus.redisio.admin import live_leases
    from tests.integration.test_key_layout import _holder, _kill

    held, wanted = 40, 3
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], held + wanted - 1, 1)
    group = names["group"]
    mine = streams[held - 1:]  # one stream shared with the holder
    proc, run = _holder(redis_server.url, ",".join(streams[:held]), group)
    try:  # the CLI (`eventbus group seek` refuses) sees it live too
        assert [x.consumer for x in live_leases(r, streams[held - 1], group)] == [
            f"spark-{group}"]
        other = driver_reader(redis_server.url, ",".join(mine[1:] + mine[:1]), group)
        with pytest.raises(ConfigError, match="option 'consumer'") as err:
            other.initialOffset()
        assert repr(streams[held - 1]) in str(err.value) and run in str(err.value)
        # what its pipelined acquire took is given back: the free streams are not held
        assert r.exists(*(lease_key(s, group, f"spark-{group}") for s in mine[1:])) == 0
        other.stop()
    finally:
        _kill(proc)
    shared = lease_key(streams[held - 1], group, f"spark-{group}")
    assert r.get(shared).decode().split(" ")[0] == run  # the killed holder's lease is there
    successor = driver_reader(redis_server.url, ",".join(mine), group)
    successor.initialOffset()  # ... until its heartbeat expires
    assert r.get(shared).decode().split(" ")[1] == successor.driver.lease.owner
    successor.stop()
    assert r.exists(shared) == 0 and live_leases(r, streams[held - 1], group) == []


@pytest.mark.server
def test_a_pattern_subscription_picks_up_new_streams_and_drops_deleted_ones(redis_server,
                                                                           names):
    from spark_eventbus.core.keys import lease_key, plan_key

    r = redis_server.client()
    group, base = names["group"], names["stream"]
    first = {f"{base}:a/{i}" for i in produce(r, f"{base}:a", 4)}
    first |= {f"{base}:b/{i}" for i in produce(r, f"{base}:b", 3)}
    r.set(f"{base}:not-a-stream", "x")
    reader = driver_reader(redis_server.url, "", group, streamPattern=f"{base}:*",
                           discoveryIntervalMs="0")

    def batch(start: dict) -> tuple[dict, set[str]]:
        end = reader.latestOffset(start, ReadAllAvailable())
        got = set()
        for part in reader.partitions(start, end):
            for rb in reader.read(part):
                got |= {f"{s}/{i}" for s, i in zip(rb.column("stream").to_pylist(),
                                                   rb.column("id").to_pylist(), strict=True)}
        reader.commit(end)
        return end, got

    start = reader.initialOffset()
    end, got = batch(start)
    assert got == first
    assert reader.reportLatestOffset()["_eventbus"]["streams"] == 2
    # a stream created mid-query joins at startingPosition (earliest): none of it is missed
    new = {f"{base}:c/{i}" for i in produce(r, f"{base}:c", 5)}
    more = {f"{base}:a/{i}" for i in produce(r, f"{base}:a", 2, 10)}
    end, got = batch(end)
    assert got == new | more
    assert reader.reportLatestOffset()["_eventbus"]["streams"] == 3
    # a deleted stream leaves cleanly: its bookkeeping goes, the others flow on
    r.delete(f"{base}:b")
    last = {f"{base}:c/{i}" for i in produce(r, f"{base}:c", 1, 20)}
    end, got = batch(end)
    assert got == last
    assert reader.reportLatestOffset()["_eventbus"]["streams"] == 2
    consumer = f"spark-{group}"
    assert not r.exists(plan_key(f"{base}:b", group, consumer),
                        lease_key(f"{base}:b", group, consumer))
    assert reader.latestOffset(end, ReadAllAvailable()) is end
    reader.stop()
    assert pending(r, f"{base}:a", group) == pending(r, f"{base}:c", group) == 0


def test_a_batch_read_refuses_a_stream_pattern_naming_the_option(spark, redis_server):
    df = (spark.read.format("eventbus").option("url", redis_server.url)
          .option("streamPattern", "orders:*").load())
    with pytest.raises(Exception, match="option 'streamPattern' is for streaming reads"):
        df.collect()


@pytest.mark.parametrize("fail", [True, False], ids=["failOnDataLoss", "skip"])
@pytest.mark.server
def test_a_stream_deleted_with_unread_entries_follows_fail_on_data_loss(redis_server, names,
                                                                      fail):
    from spark_eventbus.errors import DataLossError

    r = redis_server.client()
    group, base = names["group"], names["stream"]
    produce(r, f"{base}:a", 2)
    produce(r, f"{base}:b", 10)
    reader = driver_reader(redis_server.url, "", group, streamPattern=f"{base}:*",
                           discoveryIntervalMs="0", failOnDataLoss=str(fail).lower())
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(4))  # 2 of a, 2 of b; 8 of b unread
    assert BatchOffset.from_json(end).count == 4
    reader.commit(end)
    reader.driver.prefetch.stop()  # the pre-claim of the next batch took 4 more of b: they
    # are lost too (claimed, never shipped), with the 4 never claimed
    r.delete(f"{base}:b")
    if fail:
        with pytest.raises(DataLossError, match=f"'{base}:b' \\(8 entries\\).*failOnDataLoss"):
            reader.latestOffset(end, ReadMaxRows(4))
    else:
        nxt = reader.latestOffset(end, ReadMaxRows(4))
        report = reader.reportLatestOffset()["_eventbus"]
        assert (report["lostEntries"], report["lostRanges"], report["streams"]) == (8, 1, 1)
        assert nxt is end  # nothing left: a is read, b is gone
    reader.stop()


def test_more_streams_with_news_than_the_budget_take_turns(redis_server, names):
    """maxEntriesPerTrigger below MIN_SHARE entries per stream with new entries: the streams
    take turns in the order listed, each drained whole while it is small (a stream a batch
    touches costs a claim, a plan, a read, an ack and a close, so each is touched once, not
    once in every batch), and the ones listed last come next (not left behind the first)."""
    r = redis_server.client()
    streams, _ = _many(r, names["stream"], 10, 5)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"])
    start = reader.initialOffset()
    batches: list[dict[str, int]] = []
    for _ in range(4):
        end = reader.latestOffset(start, ReadMaxRows(20))
        if end is start:
            break
        batches.append({s: b.count for s, b in BatchOffset.from_json(end).streams.items()})
        reader.commit(end)
        start = end
    reader.stop()
    assert [sorted(b) for b in batches] == [streams[0:4], streams[4:8], streams[8:10]]
    assert all(n == 5 for b in batches for n in b.values())  # each stream whole, once


def test_streams_drained_whole_in_their_turn_are_not_asked_again(redis_server, names):
    """Streams take turns and each turn takes a stream whole (its lag known): each stream is
    claimed once, with one XREADGROUP, and the batch's spare is not offered to them again one
    stream at a time (400 round trips that find nothing)."""
    r = redis_server.client()
    streams, ids = _many(r, names["stream"], 400, 2)
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"])
    start = reader.initialOffset()
    reads, claims = _calls(r, "xreadgroup"), _calls(r, "xinfo|stream")  # one per claim
    end = reader.latestOffset(start, ReadMaxRows(1_000))  # < 400 x MIN_SHARE: turns
    reader.driver.prefetch.join()
    batch = BatchOffset.from_json(end)
    assert batch.count == len(ids) and len(batch.streams) == 400
    assert _calls(r, "xreadgroup") - reads == 400
    assert _calls(r, "xinfo|stream") - claims == 400
    reader.stop()


@pytest.mark.server
def test_heartbeat_leases_over_names_with_braces_colons_and_a_shared_tag(redis_server, names):
    """The leases live long and the driver's one heartbeat says it is alive:
    with stream names holding braces, colons and a hash tag they share, each stream still gets
    a lease of its own (in its slot), and a successor of a holder whose heartbeat stopped takes
    every one of them over."""
    from spark_eventbus.core.keys import alive_key, lease_key

    r = redis_server.client()
    base, group = names["stream"], names["group"]
    forms = ("{%s}:orders:%d", "{%s}:orders:{%d}", "%s}{odd:%d", "%s:{}:%d", "a:b:%s::%d")
    streams = [forms[i % len(forms)] % (base, i) for i in range(40)]
    for s in streams:
        r.xadd(s, {"n": "1"})
    reader = driver_reader(redis_server.url, ",".join(streams), group)
    reader.initialOffset()
    lease = reader.driver.lease
    keys = [lease_key(s, group, f"spark-{group}") for s in streams]
    assert len(set(keys)) == len(streams)
    assert all(v is not None and v.decode().endswith(f" {lease.owner}")
               for v in r.mget(keys))
    assert r.pttl(alive_key(lease.owner)) > 0
    # the holder's driver dies: its renewals and its heartbeat stop, its leases stay
    lease._stop.set()
    if lease._thread is not None:
        lease._thread.join()
    r.delete(alive_key(lease.owner))
    successor = driver_reader(redis_server.url, ",".join(reversed(streams)), group)
    successor.initialOffset()
    owner = successor.driver.lease.owner
    assert owner != lease.owner
    assert all(v is not None and v.decode().split(" ")[1] == owner for v in r.mget(keys))
    successor.stop()
    assert r.exists(*keys) == 0


@pytest.mark.server
def test_quiet_streams_on_a_cluster_are_found_by_xread_not_probed(redis_cluster, names):
    """On a cluster too a quiet stream is not probed each trigger: one XREAD per slot the
    streams use (keys of one command share a slot), one round trip per master; a stream that
    gets entries is found at the next trigger."""
    r = redis_cluster.client()
    masters = [n.client() for n in redis_cluster.masters()]
    streams, _ = _many(r, f"{names['stream']}-c", 40, 1)
    reader = driver_reader(redis_cluster.url, ",".join(streams), names["group"],
                           claimMinIdleMs="600000")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(end)
    for _ in range(3):  # acks of the batch, the streams it touched probed once more
        assert reader.latestOffset(end, ReadAllAvailable()) is end

    def calls(command: str) -> int:
        return sum(_calls(m, command) for m in masters)
    xinfo, xread = calls("xinfo|groups"), calls("xread")
    for _ in range(5):
        assert reader.latestOffset(end, ReadAllAvailable()) is end
    assert calls("xinfo|groups") == xinfo  # no stream probed
    slots = len({key_slot(s) for s in streams})
    assert calls("xread") - xread == 5 * slots
    produce(r, streams[7], 3)
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert BatchOffset.from_json(nxt).streams[streams[7]].count == 3
    reader.stop()


def test_progress_over_10000_streams_stays_under_64_kb_with_exact_aggregates(redis_server,
                                                                             names):
    """A query over 10,000 streams: the source's progress (``latestOffset``) is at most 64 KB
    (it was 1.48 MB: a row per stream), shows every stream of the batch, says how many it left
    out, and its aggregates match XINFO GROUPS summed over all 10,000."""
    r = redis_server.client()
    n = 10_000
    streams = [f"{names['stream']}-{i:05d}" for i in range(n)]
    pipe = r.pipeline(transaction=False)
    for i, s in enumerate(streams):
        for j in range(1 + i % 3):
            pipe.xadd(s, {"n": str(j)})
    pipe.execute()
    reader = driver_reader(redis_server.url, ",".join(streams), names["group"],
                           maxEntriesPerTrigger="300")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(300))
    batch = BatchOffset.from_json(end).streams
    # the pre-claim of the next batch (300 more) runs while Spark would run this one: done
    # first, so that Redis holds still while the report and XINFO GROUPS are compared
    reader.driver.prefetch.join()
    report = reader.reportLatestOffset()
    size = len(json.dumps(report))
    print(f"progress over {n:,} streams: {size:,} bytes")
    assert size <= 64 * 1024, size
    totals = report["_eventbus"]
    shown = [k for k in report if k != "_eventbus"]
    assert totals["streams"] == n and totals["streamsNotShown"] == n - len(shown) > 0
    assert set(batch) <= set(shown)  # every stream of the batch is shown
    pipe = r.pipeline(transaction=False)
    for s in streams:
        pipe.xinfo_groups(s)
    groups = [g[0] for g in pipe.execute()]
    lags = [int(g["lag"]) for g in groups]
    assert totals["entriesBehind"] == sum(lags)
    assert totals["entriesBehindMax"] == max(lags) and totals["entriesBehindMin"] == min(lags)
    # this batch's 300 and the next one's, pre-claimed (the report follows both claims
    # without asking the streams again: ProbeCache.claimed)
    assert totals["pending"] == sum(int(g["pending"]) for g in groups) == 600
    assert totals["claimed"] == 300
    for s in shown[:50] + list(batch)[:50]:
        g = groups[streams.index(s)]
        assert report[s]["entriesBehind"] == int(g["lag"])
        assert report[s]["pending"] == int(g["pending"])
        assert report[s]["lastDeliveredId"] == g["last-delivered-id"].decode()
    reader.stop()
