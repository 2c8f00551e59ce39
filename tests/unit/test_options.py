from __future__ import annotations

import json
import logging
import re

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.options.reader import parse_reader_options
from spark_eventbus.options.writer import parse_sink_options

BASE = {"stream": "orders", "group": "billing"}


def test_defaults_follow_the_design_contract():
    o = parse_reader_options(BASE, streaming=True)
    assert o.url == "redis://localhost:6379/0"
    assert o.consumer_name == "spark-billing"
    assert (o.max_entries_per_trigger, o.num_partitions) == (100_000, 2)
    assert (o.claim_min_idle_ms, o.reclaim_max_entries, o.max_deliveries) == (60_000, 1000, 0)
    assert (o.ack_mode, o.fail_on_data_loss, o.starting_position.of("orders")) == (
        "commit", True, "latest")
    assert not o.starting_position.given("orders")  # the default: nothing to warn about
    assert (o.value_field, o.fields_binary, o.start_id.of("orders"), o.end_id.of("orders")) == (
        "payload", False, "-", "+")


def test_option_names_are_case_insensitive_and_streams_split_on_commas():
    o = parse_reader_options({"STREAM": " a , b ", "Group": "g", "MAXENTRIESPERTRIGGER": "5"},
                             streaming=True)
    assert o.streams == ("a", "b")
    assert o.max_entries_per_trigger == 5


@pytest.mark.parametrize(("extra", "message"), [
    ({"stream": ""}, "option 'stream' is required"),
    ({"stream": "a,a"}, "names a stream twice"),
    ({"streamPattern": "tenant:*"}, "options 'stream' and 'streamPattern'"),
    ({"streamPattern": "t:*", "discoveryIntervalMs": "-1"}, "'discoveryIntervalMs' = '-1'"),
    ({"group": " "}, "option 'group' is blank: name the consumer group"),
    ({"maxEntriesPerTrigger": "0"}, "'maxEntriesPerTrigger' = '0' is invalid"),
    ({"numPartitions": "2.5"}, "'numPartitions' = '2.5' is invalid"),
    ({"reclaimMaxEntries": "1000001"}, "'reclaimMaxEntries' = '1000001' is invalid"),
    ({"ackMode": "auto"}, "use one of commit, manual, none"),
    ({"failOnDataLoss": "yes"}, "use 'true' or 'false'"),
    ({"fieldsType": "json"}, "use one of string, binary"),
    ({"maxDeliveries": "3"}, "needs option 'deadLetterStream'"),
    ({"deadLetterStream": "orders", "maxDeliveries": "3"}, "is also a source stream"),
    ({"url": "http://x"}, "option 'url'"),
    ({"startingPosition": "yesterday"}, "or a timestamp, epoch milliseconds"),
    ({"startingPosition": "1969-12-31T23:59:59Z"}, "is before 1970"),
    ({"valueSchema": "a MAP<INT, STRING>"}, "MAP<STRING"),
    ({"maxBytesPerTrigger": "0"}, "'maxBytesPerTrigger' = '0' is invalid"),
    ({"minEntriesPerTrigger": "-1"}, "'minEntriesPerTrigger' = '-1' is invalid"),
    ({"maxTriggerDelay": "soon"}, "'maxTriggerDelay' = 'soon' is invalid: expected a duration"),
    ({"minEntriesPerTrigger": "20", "maxEntriesPerTrigger": "10"},
     "'minEntriesPerTrigger' = 20 is more than option 'maxEntriesPerTrigger' = 10"),
])
def test_invalid_values_name_the_option_and_the_fix(extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_reader_options({**BASE, **extra}, streaming=True)


def test_without_a_group_options_that_need_one_are_refused_in_both_modes():
    for streaming in (True, False):
        with pytest.raises(ConfigError, match="options 'consumer', 'ackMode' need a consumer "
                           "group, and option 'group' is not given"):
            parse_reader_options({"stream": "s", "ackMode": "none", "consumer": "c"},
                                 streaming=streaming)
    o = parse_reader_options({"stream": "s", "failOnDataLoss": "false"}, streaming=True)
    assert o.group is None and not o.fail_on_data_loss
    for streaming in (True, False):  # load() parses a streaming read as a batch read
        with pytest.raises(ConfigError, match="'readFrom' = 'replica' is for reads without"):
            parse_reader_options({"stream": "s", "group": "g", "readFrom": "replica"},
                                 streaming=streaming)


def test_a_stream_pattern_replaces_the_stream_list():
    o = parse_reader_options({"streamPattern": "tenant:*", "group": "g"}, streaming=True)
    assert (o.streams, o.stream_pattern, o.discovery_interval_ms) == ((), "tenant:*", 30_000)


def test_trigger_controls_default_off_with_kafkas_15_minute_delay(caplog):
    o = parse_reader_options(BASE, streaming=True)
    assert (o.max_bytes_per_trigger, o.min_entries_per_trigger) == (None, None)
    assert o.max_trigger_delay_ms == 15 * 60_000
    o = parse_reader_options({**BASE, "maxBytesPerTrigger": "1048576", "minEntriesPerTrigger":
                              "500", "maxTriggerDelay": "30s"}, streaming=True)
    assert (o.max_bytes_per_trigger, o.min_entries_per_trigger) == (1_048_576, 500)
    assert o.max_trigger_delay_ms == 30_000
    assert parse_reader_options({**BASE, "minEntriesPerTrigger": "1", "maxTriggerDelay": "250"},
                                streaming=True).max_trigger_delay_ms == 250
    with caplog.at_level(logging.WARNING, "spark_eventbus"):
        parse_reader_options({**BASE, "maxTriggerDelay": "1m"}, streaming=True)
    assert "'maxTriggerDelay' has no effect without option 'minEntriesPerTrigger'" in caplog.text


def test_batch_reads_need_no_group_but_check_the_id_range():
    o = parse_reader_options({"stream": "s", "startId": "10-0", "endId": "20"}, streaming=False)
    assert (o.start_id.of("s"), o.end_id.of("s")) == ("10-0", "20")
    with pytest.raises(ConfigError, match=r"range of stream 's' is empty: it starts at '30'"):
        parse_reader_options({"stream": "s", "startId": "30", "endId": "20"}, streaming=False)


def test_batch_bounds_take_ids_words_timestamps_and_kafkas_time_options():
    def bounds(**extra: str) -> tuple[str, str]:
        o = parse_reader_options({"stream": "s", **extra}, streaming=False)
        return o.start_id.of("s"), o.end_id.of("s")
    assert bounds(startId="earliest", endId="latest") == ("-", "+")
    # a time: the entries of that millisecond are in, at either end (XRANGE's '<ms>')
    assert bounds(startId="2023-11-14T22:13:20Z", endId="2023-11-14T22:13:21Z") == (
        "1700000000000-0", "1700000001000")
    # Kafka's names: from the first entry at or after the start, up to (not at) the end
    assert bounds(startingTimestamp="1700000000000", endingTimestamp="2023-11-14T22:13:21Z") \
        == ("1700000000000-0", "(1700000001000-0")
    with pytest.raises(ConfigError, match=r"options 'startId' and 'startingTimestamp' are both"):
        bounds(startId="1-0", startingTimestamp="5")
    with pytest.raises(ConfigError, match=r"option 'endingTimestamp' = 'soon' is invalid: use a "
                                          r"timestamp"):
        bounds(endingTimestamp="soon")
    with pytest.raises(ConfigError, match=r"range of stream 's' is empty"):
        bounds(startingTimestamp="2000", endingTimestamp="1000")
    with pytest.raises(ConfigError, match=r"range of stream 's' is empty"):
        bounds(startingTimestamp="2000", endingTimestamp="2000")  # the end is excluded
    # an end at a millisecond takes all of it: an ID within it is not after it
    assert bounds(startId="1700000000000-5", endId="2023-11-14T22:13:20Z") == (
        "1700000000000-5", "1700000000000")
    for extra, says in [({"startId": "latest"}, r"'startId' = 'latest' would read nothing.*"
                                                r"Use earliest"),
                        ({"endId": "-"}, r"'endId' = '-' would read nothing.*Use latest"),
                        ({"endingTimestamp": "1970-01-01T00:00:00Z"},
                         r"'endingTimestamp' = .* would read nothing")]:
        with pytest.raises(ConfigError, match=says):
            bounds(**extra)


def test_positions_per_stream_as_json_like_kafkas_per_partition():
    o = parse_reader_options({"stream": "a,b,c,d", "group": "g", "startingPosition": json.dumps(
        {"a": "1700000000000-5", "b": "2023-11-14T22:13:20Z", "c": "earliest",
         "*": "1700000000000"})}, streaming=True)
    at = o.starting_position
    assert [at.of(s) for s in "abcd"] == [
        "1700000000000-5", f"1699999999999-{2**64 - 1}", "earliest",
        f"1699999999999-{2**64 - 1}"]  # d: the '*' value
    one = parse_reader_options({**BASE, "startingPosition": '{"orders": 0}'},
                               streaming=True).starting_position
    assert (one.of("other"), one.given("other"), one.given("orders")) == ("latest", False, True)
    assert at.given("d")  # '*' names the rest
    b = parse_reader_options({"stream": "x,y", "startId": '{"x": "5-1"}',
                              "endingTimestamp": '{"y": 9, "*": "2023-11-14T22:13:20Z"}'},
                             streaming=False)
    assert (b.start_id.of("x"), b.start_id.of("y")) == ("5-1", "-")
    assert (b.end_id.of("x"), b.end_id.of("y")) == ("(1700000000000-0", "(9-0")
    # under a pattern, a name must match it (Redis's glob: [^...] negates, \ escapes)
    pat = parse_reader_options({"streamPattern": "orders:[^x]*", "group": "g",
                                "startingPosition": '{"orders:eu": "earliest"}'}, streaming=True)
    assert pat.starting_position.of("orders:eu") == "earliest"
    for options, named in [
        ({**BASE, "startingPosition": '{"order": "earliest"}'}, "order"),
        ({"stream": "x", "startId": '{"y": "1-0"}'}, "y"),
        ({"streamPattern": "orders:[^x]*", "group": "g",
          "startingPosition": '{"orders:x1": "earliest"}'}, "orders:x1"),
    ]:
        with pytest.raises(ConfigError, match=rf"names stream '{named}', which this read does "
                                              r"not read \((stream|streamPattern) = "):
            parse_reader_options(options, streaming="group" in options)
    for bad, says in [("{nope", "is not valid JSON"), ('{"orders": [1]}', "a JSON object maps"),
                      ('{"orders": true}', "not the value of 'orders'"),
                      ('{"orders": "soon"}', r"option 'startingPosition\[orders\]' = 'soon'")]:
        with pytest.raises(ConfigError, match=says):
            parse_reader_options({**BASE, "startingPosition": bad}, streaming=True)


def test_ignored_options_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING, "spark_eventbus"):
        parse_reader_options({**BASE, "startId": "1-0"}, streaming=True)
    assert "'startId' has no effect on streaming reads" in caplog.text


@pytest.mark.parametrize("streaming", [True, False])
def test_an_unknown_option_fails_naming_the_closest_one(streaming):
    """A typo is not ignored: a misspelt startingPosition would create the group at `latest`,
    and fixing the typo later would change nothing (the group exists by then)."""
    with pytest.raises(ConfigError, match=re.escape(
            "unknown option 'startPosition' (did you mean 'startingPosition'?)")):
        parse_reader_options({**BASE, "startPosition": "earliest"}, streaming=streaming)
    with pytest.raises(ConfigError) as err:
        parse_reader_options({**BASE, "maxEntries": "5", "zzz": "1"}, streaming=streaming)
    text = str(err.value)
    assert "unknown options 'maxEntries' (did you mean 'maxEntriesPerTrigger'?), 'zzz':" in text
    assert "stream, " in text.split("The options of")[1]  # the list to pick from
    # Spark's own options are not ours to refuse
    parse_reader_options({**BASE, "path": "x", "checkpointLocation": "/c"}, streaming=streaming)


# What Spark itself puts into a data source's options (options.SPARK_OPTIONS says where each
# comes from in Spark's code), as Spark spells them.
SPARK_ADDED = {"path": "/p", "paths": '["/p"]', "checkpointLocation": "/c",
               "queryName": "flow_orders", "__v1_save_as_table_overwrite": "true"}


@pytest.mark.parametrize("mode", ["stream", "batch", "stream-nogroup", "sink"])
def test_options_spark_adds_are_accepted_silently_in_every_mode(mode, caplog):
    """A named query (writeStream.queryName, every Declarative Pipelines flow) passes
    'queryName' to the sink and the reader: neither refuses nor warns about it."""
    with caplog.at_level(logging.WARNING, "spark_eventbus"):
        if mode == "sink":
            o = parse_sink_options({"stream": "out", **SPARK_ADDED})
            assert o.stream == "out"
        else:
            base = {"stream": "orders"} if mode != "stream" else BASE
            parse_reader_options({**base, **SPARK_ADDED}, streaming=mode != "batch")
    assert caplog.records == []
    # a user's unknown option is still refused, naming the closest
    with pytest.raises(ConfigError, match=r"unknown option 'chunkSise' \(did you mean 'chunkSize'"):
        parse_sink_options({"stream": "out", "chunkSise": "500"})


def test_ack_mode_none_disables_reclaim_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, "spark_eventbus"):
        o = parse_reader_options({**BASE, "ackMode": "none", "claimMinIdleMs": "5"},
                                 streaming=True)
    assert not o.reclaim_enabled
    assert "no effect with ackMode=none" in caplog.text


def test_password_is_not_in_repr_or_url_errors():
    o = parse_reader_options({**BASE, "password": "hunter2"}, streaming=True)
    assert "hunter2" not in repr(o)
    with pytest.raises(ConfigError) as err:
        parse_reader_options({**BASE, "url": "http://u:hunter2@h"}, streaming=True)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(("value", "group_at"), [
    ("latest", "latest"), ("earliest", "earliest"), ("$", "$"), ("0", "0"),
    ("1700000000000-5", "1700000000000-5"),  # an ID: the group starts after it
    # timestamps: the group starts at the first entry at or after them
    ("1700000000000", f"1699999999999-{2**64 - 1}"),
    ("2023-11-14T22:13:20Z", f"1699999999999-{2**64 - 1}"),
    ("2023-11-14T22:13:20.001", f"1700000000000-{2**64 - 1}"),  # no zone: UTC
    ("2023-11-14T23:13:20+01:00", f"1699999999999-{2**64 - 1}"),
    ("1", f"0-{2**64 - 1}"),
])
def test_starting_position_takes_ids_and_timestamps(value, group_at):
    opts = parse_reader_options({**BASE, "startingPosition": value}, streaming=True)
    assert opts.starting_position.of("orders") == group_at


def test_every_ms_option_takes_a_duration_with_a_unit_by_one_rule():
    """Every …Ms option (and maxTriggerDelay) takes milliseconds or a duration with a unit;
    its range holds either way, and the message names the option and both forms."""
    o = parse_reader_options({"group": "g", "streamPattern": "t:*", "claimMinIdleMs": "2m",
                              "failoverTimeoutMs": "30s", "waitTimeoutMs": "1500ms",
                              "discoveryIntervalMs": "1h", "trimIntervalMs": "10000",
                              "maxTriggerDelay": "1d"}, streaming=True)
    assert (o.claim_min_idle_ms, o.failover_timeout_ms, o.wait_timeout_ms) == (
        120_000, 30_000, 1_500)
    assert (o.discovery_interval_ms, o.trim_interval_ms, o.max_trigger_delay_ms) == (
        3_600_000, 10_000, 86_400_000)
    for raw in ("2h", "1.5s", "-1s", "30 sec"):  # 2h is past failoverTimeoutMs's hour
        with pytest.raises(ConfigError, match=re.escape(
                f"option 'failoverTimeoutMs' = {raw!r} is invalid: expected a duration from "
                "0 to 3600000 ms, in milliseconds ('30000') or with a unit ('30s'")):
            parse_reader_options({**BASE, "failoverTimeoutMs": raw}, streaming=True)


def test_redis_options_are_redis_pys_settings_by_an_allow_list():
    """Options redis.* reach redis-py (its names and units); an unknown one is refused naming
    the closest, one the connector sets itself naming the option that sets it, and a socket
    timeout not longer than waitTimeoutMs (a WAIT would time out at the socket first)."""
    o = parse_reader_options({**BASE, "redis.socket_timeout": "120",
                              "REDIS.socket_connect_timeout": "2.5",
                              "redis.socket_keepalive": "false", "redis.client_name": "job-7",
                              "redis.health_check_interval": "15"}, streaming=True)
    assert dict(o.connection.client_settings) == {
        "socket_timeout": 120.0, "socket_connect_timeout": 2.5, "socket_keepalive": False,
        "client_name": "job-7", "health_check_interval": 15.0}
    assert parse_reader_options(BASE, streaming=True).connection.client_settings == ()
    assert parse_reader_options({**BASE, "redis.socket_timeout": "4"}, streaming=True)  # no WAIT
    for extra, message in [
        ({"redis.socket_timout": "9"}, "unknown option 'redis.socket_timout' (did you mean "
                                       "'redis.socket_timeout'?)"),
        ({"redis.password": "x"}, "option 'redis.password' is set by the connector itself: "
                                  "use option 'password or passwordFile'"),
        ({"redis.protocol": "2"}, "option 'redis.protocol' is set by the connector itself"),
        ({"redis.socket_timeout": "0"}, "option 'redis.socket_timeout' = '0' is invalid: "
                                        "expected seconds from 1 to 3600"),
        ({"redis.socket_timeout": "4", "waitReplicas": "1"},
         "option 'redis.socket_timeout' = 4 s is not longer than option 'waitTimeoutMs' = 5000"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_reader_options({**BASE, **extra}, streaming=True)
