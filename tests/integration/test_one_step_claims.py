"""Small claims in one step (``claim_read.lua``: checks, ``XREADGROUP >`` inside the script,
the chunk recorded in the plan, atomic) against the three steps of large ones (``claim.lua``,
the driver's own ``XREADGROUP``, ``claim_record.lua``), on each server: the same plans, PEL
and acks; an intent a three-step claim left open closed first; losses, AvailableNow's bound,
a missing group and another query's lease answered as the three steps answer them."""

from __future__ import annotations

import pytest
import redis

from spark_eventbus.core.connection import connection_spec
from spark_eventbus.core.offsets import StreamBatch
from spark_eventbus.errors import ConfigError
from spark_eventbus.redisio import ConsumerOps, acks, claims, plans
from spark_eventbus.redisio.claims import ONE_STEP_CLAIM, ClaimAsk
from spark_eventbus.redisio.scripts import run_script
from tests.integration.helpers import pending, produce

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _ops(url: str, stream: str, group: str, consumer: str = "c") -> ConsumerOps:
    return ConsumerOps(connection_spec(url), stream, group, consumer, cache_ack_ids=True)


def _calls(r: redis.Redis, name: str) -> int:
    """How many times the server ran command ``name``, from a client or a script (``INFO
    commandstats``)."""
    return int(r.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def test_one_step_and_three_step_claims_leave_the_same_plans_pel_and_acks(redis_server,
                                                                          names):
    """The same 250 entries claimed as 50-entry chunks (one step each) by one group and as one
    250-entry chunk (three steps) by another: the same entries in each plan, as contiguous
    chunks, all pending with one delivery, and acked by the IDs the claims returned (no
    XPENDING) down to nothing pending."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 250)
    small, large = _ops(redis_server.url, names["stream"], "small"), \
        _ops(redis_server.url, names["stream"], "large")
    for op in (small, large):
        r.xgroup_create(op.stream, op.group, "0")
    assert 50 <= ONE_STEP_CLAIM < 250
    writes = _calls(r, "hset")
    one = [claims.claim([ClaimAsk(small, 50, None)], "run", 1, True)[0] for _ in range(5)]
    assert _calls(r, "hset") == writes + 5  # one plan write per claim (no intent)
    three = claims.claim([ClaimAsk(large, 250, None)], "run", 1, True)[0]
    assert _calls(r, "hset") == writes + 7  # intent, then record
    assert [res.status for res in one] == ["ok"] * 5 and three.status == "ok"
    assert [(c.first, c.last, c.count) for c in (res.chunk for res in one) if c] == [
        (ids[k], ids[k + 49], 50) for k in range(0, 250, 50)]
    assert three.chunk is not None and (three.chunk.first, three.chunk.last) == (ids[0], ids[-1])
    got_small, got_large = plans.plans([small, large], "run", 1)
    assert got_small.count == got_large.count == 250
    assert got_small.chunks == tuple(res.chunk for res in one)
    assert got_large.chunks == (three.chunk,)
    for op in (small, large):
        assert {int(e["times_delivered"]) for e in r.xpending_range(
            op.stream, op.group, "-", "+", 1_000)} == {1}
    # A claim when nothing is new: empty, and the plan is not written again.
    assert claims.claim([ClaimAsk(small, 50, None)], "run", 1, True)[0].status == "empty"
    xpending = _calls(r, "xpending")
    assert acks.ack([(small, got_small)]) == {names["stream"]: 250}
    assert acks.ack([(large, got_large)]) == {names["stream"]: 250}
    assert _calls(r, "xpending") == xpending  # acked by the claimed IDs
    assert pending(r, names["stream"], "small") == pending(r, names["stream"], "large") == 0


def test_a_one_step_claim_closes_an_intent_left_open_first(redis_server, names):
    """A three-step claim cut short after its XREADGROUP (the driver killed) leaves its entries
    in the PEL only; the next claim of that batch in one step records them (as listed IDs)
    and then its own chunk after them: nothing waits for reclaim, nothing twice."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 100)
    r.xgroup_create(names["stream"], names["group"], "0")
    op = _ops(redis_server.url, names["stream"], names["group"])
    assert run_script(op.redis, "claim", *op.claim_intent("run", 1, None, True))[0] == b"read"
    r.xreadgroup(op.group, op.consumer, {op.stream: ">"}, count=30)  # ... then killed
    res = claims.claim([ClaimAsk(op, 20, None)], "run", 1, True)[0]
    assert res.chunk is not None and (res.chunk.first, res.chunk.count) == (ids[30], 20)
    plan = plans.plans([op], "run", 1)[0]
    assert [i for i, _ in plan.reclaimed] == ids[:30] and plan.chunks == (res.chunk,)
    assert plan.count == pending(r, op.stream, op.group) == 50
    # ... and the intent is closed: a plan read finds nothing more to add
    assert plans.plans([op], "run", 1)[0] == plan


def test_one_step_claims_report_losses_bounds_and_refusals_as_three_steps_do(redis_server,
                                                                            names):
    """Entries trimmed before the group read them: reported (``failOnDataLoss`` true: 'loss',
    nothing claimed; false: claimed with the loss described); ``Trigger.AvailableNow``'s last
    ID reached: 'done'; another query's lease: refused naming the option; a destroyed group,
    a deleted stream, a key of another type: 'nogroup'."""
    r = redis_server.client()
    stream = names["stream"]
    ids = produce(r, stream, 10)
    r.xgroup_create(stream, names["group"], "0")
    r.xtrim(stream, maxlen=6, approximate=False)  # 4 entries gone before the group read them
    op = _ops(redis_server.url, stream, names["group"])
    lost = claims.claim([ClaimAsk(op, 5, None)], "run", 1, True)[0]
    assert (lost.status, lost.chunk, lost.lost_count) == ("loss", None, 4)
    assert pending(r, stream, names["group"]) == 0
    went_on = claims.claim([ClaimAsk(op, 5, None)], "run", 1, False)[0]
    assert went_on.status == "ok" and went_on.lost_count == 4
    assert went_on.chunk is not None and (went_on.chunk.first, went_on.chunk.count) == (ids[4], 5)
    done = claims.claim([ClaimAsk(op, 5, went_on.chunk.last)], "run", 1, False)[0]
    assert (done.status, done.chunk) == ("done", None)
    r.set(op.lease_key, "other-run other-owner")
    op.lease_token = "run owner"
    with pytest.raises(ConfigError, match="option 'consumer'"):
        claims.claim([ClaimAsk(op, 5, None)], "run", 1, False)
    r.delete(op.lease_key)
    r.xgroup_destroy(stream, names["group"])
    assert claims.claim([ClaimAsk(op, 5, None)], "run", 1, False)[0].status == "nogroup"
    assert plans.plans([op], "run", 1)[0].count == 5  # only the one chunk was ever recorded
    # the stream deleted, or its key replaced by another type: no group either, both ways
    r.delete(stream)
    gone = ClaimAsk(op, 5, None), ClaimAsk(op, ONE_STEP_CLAIM + 1, None)
    assert [res.status for res in claims.claim(list(gone), "run", 1, False)] == ["nogroup"] * 2
    r.set(stream, "not a stream")
    assert [res.status for res in claims.claim(list(gone), "run", 1, False)] == ["nogroup"] * 2
    assert acks.ack([(op, StreamBatch())]) == {}
