"""The readers' options: :class:`ReaderOptions` from raw options (both read modes), the rules
across options (what needs a consumer group, per-stream positions and ranges)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..core.connection import ConnectionSpec
from ..core.ids import StreamId
from ..core.keys import glob_matches
from ..errors import ConfigError
from .modes import BATCH, READS, STREAMING
from .parsing import Connected, connection_of, parse_family
from .table import log, spelled
from .values import PerStream, unread_streams


@dataclass(frozen=True)
class ReaderOptions(Connected):
    """Validated reader options (both read modes). Picklable; the password only builds clients.
    Built by :func:`parse_reader_options`; defaults live in :data:`OPTIONS`."""

    streams: tuple[str, ...]
    consumer: str | None
    # .of(stream): a parsed startingPosition; .given(stream): whether the user gave it (it
    # applies only where the group is created: said when it is not)
    starting_position: PerStream
    max_entries_per_trigger: int
    num_partitions: int
    claim_min_idle_ms: int
    reclaim_max_entries: int
    max_deliveries: int
    dead_letter_stream: str | None
    ack_mode: str
    fail_on_data_loss: bool
    metrics_provider: str | None
    value_field: str
    value_schema: str | None
    fields_binary: bool
    start_id: PerStream  # .of(stream): an XRANGE bound (startingTimestamp folded in)
    end_id: PerStream  # (endingTimestamp folded in)
    group: str | None = None  # None for batch reads
    stream_pattern: str | None = None  # streaming: streams discovered by SCAN MATCH instead
    discovery_interval_ms: int = 30_000
    max_bytes_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    trim_acked: bool = False
    trim_interval_ms: int = 10_000
    filter_pushdown: bool = False
    delete_at_ack: bool = False
    read_from_replicas: bool = False

    @property
    def read_connection(self) -> ConnectionSpec:
        """Where reads go: :attr:`connection`, or its replicas (option ``readFrom``)."""
        return replace(self.connection, read_from_replicas=self.read_from_replicas)

    @property
    def consumer_name(self) -> str:
        return self.consumer or f"spark-{self.group}"

    @property
    def reclaim_enabled(self) -> bool:
        # With ackMode=none every delivered entry stays pending forever, so "idle pending" no
        # longer means "abandoned": reclaiming would re-deliver everything ever read.
        return self.ack_mode != "none" and self.reclaim_max_entries > 0


def parse_reader_options(raw: Mapping[str, Any], *, streaming: bool, warn: bool = True
                         ) -> ReaderOptions:
    """Validate ``raw`` Spark options (any key case) into :class:`ReaderOptions`.

    Runs on the driver. Raises :class:`ConfigError` for invalid values and unknown options;
    logs a warning for options the mode (streaming or batch) ignores.
    """
    v, given = parse_family(raw, STREAMING if streaming else BATCH, READS, warn)
    connection_of(v)
    if v["stream_pattern"] is not None:
        if v["streams"]:
            raise ConfigError(
                f"options 'stream' and 'streamPattern' = {v['stream_pattern']!r} are both "
                "given; use one: 'stream' names the streams, 'streamPattern' (a Redis glob, as "
                "SCAN MATCH) discovers them.")
    elif not v["streams"]:
        raise ConfigError("option 'stream' is required: name the Redis stream key to read, or "
                          "several separated by commas, e.g. .option('stream', 'orders').")
    if "group" not in given:
        _refuse_group_options(given)
    elif v["read_from_replicas"]:  # at load(): schema() parses a read as a batch read
        raise ConfigError("option 'readFrom' = 'replica' is for reads without a consumer group: "
                          "a group's reads (XREADGROUP, acks) are writes, which a replica "
                          "refuses. Leave option 'group' out to read from replicas, or set "
                          "readFrom to 'primary'.")
    elif streaming and v["group"] is None:
        raise ConfigError("option 'group' is blank: name the consumer group this query reads "
                          "as, e.g. .option('group', 'billing'), or leave the option out to "
                          "read without a group (positions in Spark's checkpoint, nothing "
                          "written to Redis; README: two ways of reading).")
    if streaming:
        if v["group"] is None and warn:
            for key in ("waitreplicas", "waitaof"):
                if key in given:
                    log.warning("spark-eventbus: option '%s' has no effect on a read without "
                                "a consumer group: it writes nothing to Redis.", spelled(key))
        if v["max_deliveries"] > 0 and v["dead_letter_stream"] is None:
            raise ConfigError(
                f"option 'maxDeliveries' = {v['max_deliveries']} needs option "
                "'deadLetterStream': name the stream that receives entries delivered too "
                "often, or set maxDeliveries to 0.")
        if v["dead_letter_stream"] in v["streams"]:
            raise ConfigError(
                f"option 'deadLetterStream' = {v['dead_letter_stream']!r} is also a source "
                "stream; use a separate key such as 'orders:dlq'.")
        low, high = v["min_entries_per_trigger"], v["max_entries_per_trigger"]
        if low is not None and low > high:
            raise ConfigError(
                f"option 'minEntriesPerTrigger' = {low} is more than option "
                f"'maxEntriesPerTrigger' = {high}: no batch could ever hold it; lower "
                "minEntriesPerTrigger or raise maxEntriesPerTrigger.")
        if warn and "maxtriggerdelay" in given and low is None:
            log.warning("spark-eventbus: option 'maxTriggerDelay' has no effect without "
                        "option 'minEntriesPerTrigger'.")
        if warn and "trimintervalms" in given and not v["trim_acked"]:
            log.warning("spark-eventbus: option 'trimIntervalMs' has no effect without option "
                        "'trimAcked' = 'true'.")
        if warn and v["delete_at_ack"] and v["ack_mode"] == "none":
            log.warning("spark-eventbus: option 'deleteAtAck' deletes nothing with "
                        "ackMode=none: this query acks nothing.")
        if warn and v["trim_acked"] and v["ack_mode"] == "none":
            log.warning("spark-eventbus: option 'trimAcked' trims nothing with ackMode=none: "
                        "this query's entries stay pending, and pending entries are never "
                        "trimmed.")
        if warn and v["ack_mode"] == "none":
            for key in ("claimminidlems", "reclaimmaxentries", "maxdeliveries"):
                if key in given:
                    log.warning("spark-eventbus: option '%s' has no effect with ackMode=none: "
                                "nothing is acked, so every delivered entry stays pending and "
                                "none is reclaimed.", spelled(key))
    _per_stream_checks(v, given, streaming)
    return ReaderOptions(**v)


# What only a read with a consumer group does: refused without option 'group' (a streaming
# read without one keeps its positions in Spark's checkpoint and writes nothing to Redis).
GROUP_OPTIONS = ("consumer", "ackMode", "claimMinIdleMs", "reclaimMaxEntries", "maxDeliveries",
                 "deadLetterStream", "trimAcked", "deleteAtAck", "trimIntervalMs",
                 "metricsProvider")


def _refuse_group_options(given: set[str]) -> None:
    asked = [name for name in GROUP_OPTIONS if name.lower() in given]
    if asked:
        listed = ", ".join(f"'{n}'" for n in asked)
        raise ConfigError(
            f"option{'s' if len(asked) > 1 else ''} {listed} need{'' if len(asked) > 1 else 's'}"
            " a consumer group, and option 'group' is not given. A streaming read without a "
            "group keeps its positions in Spark's checkpoint and writes nothing to Redis: no "
            "acks, no reclaim, no dead letters, no consumer leases (README: two ways of "
            f"reading). Give option 'group' to read as a consumer group, or drop {listed}.")


def _empty_range(start: str, end: str) -> bool:
    """Whether ``XRANGE start end`` (an ID, inclusive; ``end`` an ID, ``<ms>`` for all of that
    millisecond, or ``(<id>`` excluding it) can hold nothing."""
    lo = StreamId.parse(start)
    if end.startswith("("):
        return lo >= StreamId.parse(end[1:])
    hi = StreamId.parse(end) if "-" in end else StreamId(int(end), StreamId.MAX.seq)
    return lo > hi


def _per_stream_checks(v: dict[str, Any], given: set[str], streaming: bool) -> None:
    """The options given per stream name only streams the read reads (a pattern's: those
    matching it); Kafka's ``startingTimestamp``/``endingTimestamp`` fold into ``startId``/
    ``endId`` (one or the other); each stream's range is not empty by its bounds."""
    pattern = v["stream_pattern"]
    if pattern is not None:
        def reads(stream: str) -> bool:
            return glob_matches(pattern, stream)
        which = f"streamPattern = {pattern!r}"
    else:
        def reads(stream: str) -> bool:
            return stream in v["streams"]
        which = f"stream = {','.join(v['streams'])!r}"
    attrs = {"startingPosition": "starting_position", "startId": "start_id",
             "endId": "end_id", "startingTimestamp": "starting_timestamp",
             "endingTimestamp": "ending_timestamp"}
    for name in (("startingPosition",) if streaming else list(attrs)[1:]):
        if name.lower() in given:
            unread_streams(v[attrs[name]], name, reads, which)
    for ids, stamps in (("startId", "startingTimestamp"), ("endId", "endingTimestamp")):
        stamp = v.pop(attrs[stamps])
        if stamp is None or streaming:
            continue
        if ids.lower() in given:
            raise ConfigError(f"options '{ids}' and '{stamps}' are both given; use one: "
                              f"'{stamps}' is Kafka's name for a time bound, '{ids}' takes a "
                              "stream ID or a time.")
        v[attrs[ids]] = stamp
    if streaming:
        return
    for stream in v["streams"]:
        start, end = v["start_id"].of(stream), v["end_id"].of(stream)
        if start != "-" and end != "+" and _empty_range(start, end):
            raise ConfigError(f"the batch read's range of stream {stream!r} is empty: it starts "
                              f"at {start!r} (option 'startId' or 'startingTimestamp') after "
                              f"it ends at {end!r} ('endId' or 'endingTimestamp'); swap them "
                              "or widen the range.")


