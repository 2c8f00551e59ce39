"""Counting and naming entries a replayed batch no longer finds (spark_eventbus.core.losses)."""

from __future__ import annotations

import json
import shlex

import pytest

from spark_eventbus.core.connection import cli_connection, connection_spec
from spark_eventbus.core.losses import (
    SHOWN,
    LossRecord,
    RangeLoss,
    accept_command,
    listing,
    loss_message,
    range_loss,
    skip_message,
    total_missing,
)
from spark_eventbus.core.offsets import ClaimedRange

# The batch: 500 entries claimed on the old primary, 50 on the promoted replica.
FAILOVER = ClaimedRange("1795502884520-0", "1795502884990-28", 500)


def test_a_range_loses_its_count_minus_what_xrange_returned():
    lost = range_loss(FAILOVER, 50)
    assert lost == RangeLoss("1795502884520-0", "1795502884990-28", 500, 450)
    assert range_loss(FAILOVER, 500) is None
    assert range_loss(FAILOVER, 0) == RangeLoss(FAILOVER.first, FAILOVER.last, 500, 500)
    # more than claimed (cannot happen: XADD IDs only grow) is never a negative loss
    assert range_loss(FAILOVER, 501) is None


def test_the_message_counts_every_missing_entry_and_lists_the_ranges():
    lost = [range_loss(FAILOVER, 50), range_loss(ClaimedRange("1795502885000-0",
                                                              "1795502885100-3", 2000), 1997),
            RangeLoss("1795502880000-7", "1795502880000-7", 1, 1, reclaimed=True)]
    assert total_missing([x for x in lost if x]) == 454
    text = loss_message("orders", "billing", "spark-billing", 7, [x for x in lost if x])
    assert text.startswith("454 entries of stream 'orders' that batch 7 of this query claimed "
                           "(group 'billing', consumer 'spark-billing') are no longer in the "
                           "stream, in 3 ranges: ")
    assert "[1795502884520-0, 1795502884990-28]: 450 of 500" in text
    assert "[1795502885000-0, 1795502885100-3]: 3 of 2000" in text
    assert "reclaimed ID 1795502880000-7" in text
    assert "1 entries" not in text


def test_the_message_names_the_causes_in_order_the_way_past_and_what_it_means():
    text = loss_message("orders", "billing", "spark-billing", 7, [range_loss(FAILOVER, 50)],
                        ["--url", "redis://primary:6379/0"])
    causes = [text.index(c) for c in ("failover to a replica", "XDEL", "MAXLEN/MINID")]
    assert causes == sorted(causes)
    assert ("`eventbus --url redis://primary:6379/0 group accept-loss --stream orders "
            "--group billing`") in text
    assert "'failOnDataLoss' to 'false'" in text
    assert "counted in lostEntries" in text and "acked" in text and "never delivered" in text
    assert text.startswith("450 entries") and "in 1 range:" in text


def test_one_entry_reads_as_one_entry():
    text = loss_message("s", "g", "spark-g", 1, [RangeLoss("5-0", "5-0", 1, 1, reclaimed=True)])
    assert text.startswith("1 entry of stream 's'") and " is no longer in the stream" in text


def test_long_listings_are_cut_after_ten_ranges_but_counted_whole():
    lost = [RangeLoss(f"{i}-0", f"{i}-9", 10, 2) for i in range(1, 26)]
    shown = listing(lost)
    assert shown.count(": 2 of 10") == SHOWN and shown.endswith("; and 15 more")
    assert loss_message("s", "g", "spark-g", 3, lost).startswith("50 entries")


@pytest.mark.parametrize(("url", "password", "want_url", "env"), [
    ("redis://primary:6379/0", None, "redis://primary:6379/0", []),
    ("redis://primary:6379/0", "pw", "redis://primary:6379/0", ["EVENTBUS_PASSWORD"]),
    ("redis://u:pw@primary:6379/0", None, "redis://u@primary:6379/0", ["EVENTBUS_PASSWORD"]),
    ("rediss://:pw@primary:6380/1", None, "rediss://primary:6380/1", ["EVENTBUS_PASSWORD"]),
])
def test_the_command_in_the_message_can_be_pasted_and_holds_no_secret(url, password, want_url,
                                                                      env):
    """The URL without its password (never the redacted `u:***@`, which cannot be pasted); the
    password is read from EVENTBUS_PASSWORD by the CLI, and the message says so."""
    spec = connection_spec(url, password, tls_ca_cert="/etc/ca.pem" if "rediss" in url else None)
    flags, needs = cli_connection(spec)
    assert flags[:2] == ["--url", want_url] and needs == env
    text = loss_message("orders", "billing", "spark-billing", 7, [range_loss(FAILOVER, 5)],
                        flags, needs)
    command = text.split("run `")[1].split("`")[0]
    assert "pw" not in text and "***" not in text
    assert shlex.split(command)[:3] == ["eventbus", "--url", want_url]
    assert ("with the password in EVENTBUS_PASSWORD" in text) == bool(env)
    if "rediss" in url:
        assert "--tls-ca-cert /etc/ca.pem" in command


def test_the_accept_command_quotes_names_and_names_a_consumer_of_ones_own():
    assert accept_command("orders", "billing", "spark-billing") == (
        "eventbus group accept-loss --stream orders --group billing")
    cmd = accept_command("{acc}:route 1", "g", "worker-7")
    assert shlex.split(cmd)[3:] == ["--stream", "{acc}:route 1", "--group", "g",
                                    "--consumer", "worker-7"]


def test_the_skip_warning_says_why_and_what_moving_past_means():
    text = skip_message("orders", 7, [range_loss(FAILOVER, 50)], "option 'failOnDataLoss' is "
                        "'false'")
    assert "moving past 450 entries of stream 'orders' in batch 7" in text
    assert "counted in lostEntries" in text


def test_a_record_as_lua_stores_it():
    raw = json.loads(json.dumps({
        "run": "r1", "seq": 7, "failed_at": 1795502890000,
        "ranges": {"1795502884520-0..1795502884990-28": [500, 450, 0, 0],
                   "1795502880000-7": [1, 1, 1, 1]}}))
    rec = LossRecord.from_json("spark-billing", raw)
    assert (rec.run, rec.seq, rec.missing, rec.failed_at_ms) == ("r1", 7, 451, 1795502890000)
    assert rec.ranges[0] == RangeLoss("1795502880000-7", "1795502880000-7", 1, 1, True, 1, 1)
    assert rec.ranges[1].name == "1795502884520-0..1795502884990-28"
    assert rec.stopped and not rec.accepted
    accepted = LossRecord.from_json("c", {**raw, "ranges": {
        "1795502884520-0..1795502884990-28": [500, 450, 450, 0]}})
    assert accepted.accepted and accepted.stopped  # accepted, not replayed yet
    passed = LossRecord.from_json("c", {**raw, "ranges": {"1-0..2-0": [5, 2, 2, 2]}})
    assert not passed.stopped
    skipped = LossRecord.from_json("c", {"run": "r", "seq": 1,
                                         "ranges": {"1-0..2-0": [5, 2, 0, 2]}})
    assert not skipped.stopped  # failOnDataLoss=false: never stopped the query
    # cjson writes an empty object for an empty table
    assert LossRecord.from_json("c", {"run": "r", "seq": 2, "ranges": []}).ranges == ()
    assert RangeLoss(**rec.to_json()["ranges"][1]) == rec.ranges[1]
