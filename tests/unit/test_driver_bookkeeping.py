"""Pure parts of the reader's driver side: the one lag rule (:func:`checked_lag`, which both
the progress report and ``minEntriesPerTrigger`` apply) and the ledger of what this process
wrote into which batch's plan (bytes left under ``maxBytesPerTrigger``, the plan scope)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spark_eventbus.group.ledger import BatchLedger
from spark_eventbus.redisio.probes import GroupStats, checked_lag, total, unsure_lag


@pytest.mark.parametrize(("lag", "entries_read", "delivered", "newest", "oldest", "length",
                          "want"), [
    (None, 5, "5-0", "9-0", None, None, None),  # the server does not know: unknown
    (0, 5, "5-0", "9-0", None, None, 0),  # nothing to read, by the server's own count
    (4, 5, "5-0", "9-0", None, None, 4),  # entries after the last delivered one: trusted
    (40, 5, "9-0", "9-0", None, None, 0),  # nothing after the last delivered ID: 0
    (40, 5, "5-0", None, None, None, 0),  # the stream is empty: 0
    (40, 0, "5-0", "9-0", "3-0", 7, None),  # entries-read 0 after deliveries: unknown...
    (40, 0, "5-0", "9-0", "6-0", 4, 4),  # ...unless every entry is after the last delivered
    (40, 0, "0-0", "9-0", "1-0", 9, 40),  # nothing delivered yet: the server's count stands
    (4, 5, None, "9-0", None, None, 4),  # no position known: as the server says
])
def test_the_lag_rule(lag: int | None, entries_read: int, delivered: str | None,
                      newest: str | None, oldest: str | None, length: int | None,
                      want: int | None) -> None:
    assert checked_lag(lag, entries_read, delivered, newest, oldest, length) == want


@pytest.mark.parametrize(("lag", "delivered", "length", "want"), [
    (0, b"5-0", 0, True),  # empty after deliveries: Redis 8.2 says 0 even if some were missed
    (0, b"5-0", 3, False),  # entries left: the server's 0 is exact
    (0, b"0-0", 0, True),  # nothing delivered yet: entries may have come and gone
    (None, b"5-0", 0, False),  # unknown: looked at anyway
    (4, b"5-0", 0, False),  # a lag: looked at anyway
])
def test_a_zero_lag_on_an_emptied_stream_is_looked_at(lag: int | None, delivered: bytes,
                                                      length: int, want: bool) -> None:
    assert unsure_lag({b"lag": lag, b"last-delivered-id": delivered}, length) is want


def test_a_total_with_an_unknown_lag_is_unknown() -> None:
    """The one rule for totals (progress's entriesBehind, telemetry's total gauge)."""
    def stats(*lags: int | None) -> list[GroupStats]:
        return [GroupStats(0, lag, "1-0") for lag in lags]
    assert total([s.lag for s in stats(3, 0, 4)]) == 7
    assert total([s.lag for s in stats(3, None, 4)]) is None
    assert total([]) == 0


def test_the_ledger_counts_bytes_per_batch_and_keeps_only_recent_batches() -> None:
    ledger = BatchLedger(max_bytes_per_trigger=1_000)
    assert ledger.bytes_left("r", 1) == (1_000, True)
    ledger.count("r", 1, 3, 600)
    assert ledger.bytes_left("r", 1) == (400, False)
    assert ledger.knows_size("r", 1) and not ledger.knows_size("r", 2)
    for seq in range(2, 200):  # a long query: one sized batch after another
        ledger.count("r", seq, 1, 10)
    assert len(ledger.sizes) <= 3  # the batch planned, the one pre-claimed, the one in flight
    assert not ledger.knows_size("r", 1)  # a forgotten batch is shipped as it is
    assert BatchLedger(None).bytes_left("r", 1) == (None, True)


def test_the_ledger_knows_which_plans_this_process_wrote() -> None:
    ledger = BatchLedger(None)
    ledger.writes("r", 1, ["a", "b"])
    ledger.writes("r", 2, ["c"])
    ledger.writes("old", 9, ["d"])
    assert ledger.written("r", 1) == {"a", "b"}
    assert ledger.written_up_to("r", 2) == {"a", "b", "c"}
    ledger.forget_written("r", 1)  # batch 1 closed; another run's plans are gone too
    assert ledger.written_up_to("r", 5) == {"c"} and ledger.written("old", 9) == set()


def test_a_claim_moves_the_probed_group_state_or_asks_for_a_new_probe():
    """ProbeCache.claimed: what a claim of n entries makes of the last probe (pending + n,
    lag - n, delivered up to the claim's last ID); where that does not follow, None (the
    stream is probed again)."""
    from spark_eventbus.group.probe_cache import after_claim
    from spark_eventbus.redisio.probes import Probe

    # a planning probe that saw news (not full: no XINFO STREAM), all of it claimed
    seen = Probe(True, pending=2, lag=5, entries_read=10, last_delivered="7-0", consumers=1,
                 full=False)
    done = after_claim(seen, 5, "12-0")
    assert done is not None and not done.has_new and done.full
    assert done.stats() == GroupStats(7, 0, "12-0") and done.entries_read == 15
    # part of it: the rest is still news, the probe stays as full as it was
    part = after_claim(seen, 3, "10-0")
    assert part is not None and part.has_new and not part.full
    assert part.stats() == GroupStats(5, 2, "10-0")
    # a full probe keeps the stream's last generated ID and ends
    full = Probe(True, 0, 2, 3, "5-0", "9-0", "9-0", "1-0", 5, 1)
    after = after_claim(full, 2, "9-0")
    assert after is not None and after.last_generated == "9-0" and after.newest == "9-0"
    assert not after.has_new and after.length == 5
    # what does not follow: no group, an unknown lag, more read than the lag said
    assert after_claim(Probe(False), 1, "1-0") is None
    assert after_claim(Probe(True, 0, None, 0, "1-0"), 1, "2-0") is None
    assert after_claim(seen, 6, "13-0") is None


def test_an_ack_takes_its_count_off_the_probed_pending_or_asks_for_a_new_probe():
    """ProbeCache.acked: acks of n entries (the servers' count) leave the last probe as it was
    but n fewer pending; where that does not follow, None (the stream is probed again)."""
    from spark_eventbus.group.probe_cache import after_ack, after_claim
    from spark_eventbus.redisio.probes import Probe

    seen = Probe(True, pending=1, lag=4, entries_read=6, last_delivered="7-0",
                 last_generated="11-0", newest="11-0", oldest="1-0", length=10, consumers=2)
    claimed = after_claim(seen, 4, "11-0")
    assert claimed is not None
    acked = after_ack(claimed, 4)
    assert acked is not None and acked.stats() == GroupStats(1, 0, "11-0")
    assert (acked.last_generated, acked.length, acked.full) == ("11-0", 10, True)
    assert not acked.has_new and acked.has_pending
    assert after_ack(acked, 1) == replace(acked, pending=0)
    # what does not follow: no group, an unknown pending count, more acked than pending
    assert after_ack(Probe(False), 1) is None
    assert after_ack(Probe(True, None, 0, 0, "1-0"), 1) is None
    assert after_ack(acked, 2) is None


def test_a_lag_needs_the_streams_ends_only_with_entries_delivered_and_none_read():
    """Probe.lag_unsure: progress looks at a stream's ends before showing a lag only where
    checked_lag could change it (entries delivered, entries-read 0: a stale count or a group
    made at earliest), not for every stream with news."""
    from spark_eventbus.redisio.probes import Probe

    assert not Probe(True, 0, 5, 3, "7-0", full=False).lag_unsure
    assert Probe(True, 0, 5, 0, "7-0", full=False).lag_unsure
    assert not Probe(True, 0, 5, 0, "0-0", full=False).lag_unsure  # nothing delivered yet
    assert not Probe(True, 0, 0, 0, "7-0").lag_unsure and not Probe(False).lag_unsure
