"""Options of reads and writes: one declarative table, validated per mode on the driver before
any task runs.

Each :class:`Option` row gives the name as users spell it (Spark passes names in any case), the
field it fills, its parser (which raises :class:`ConfigError` naming the option, echoing the value
and saying the fix), its default, and the modes that use it:

* ``batch`` — ``spark.read.format("eventbus")``;
* ``streaming`` — ``spark.readStream.format("eventbus")``;
* ``sink`` — ``df.write`` / ``df.writeStream.format("eventbus")``;
* ``acking`` — :class:`~spark_eventbus.AckingBatchWriter`, whose keyword arguments are these
  names, or the same in snake_case (:func:`option_key`).

Rules across options (what needs a consumer group, ``maxDeliveries`` needs a dead-letter
stream, …) follow the table in :func:`parse_reader_options` / :func:`parse_sink_options`.
Unknown options fail, naming the closest option; options the mode ignores are warned about —
never silently dropped.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .connection import (
    DEFAULT_FAILOVER_TIMEOUT_MS,
    DEFAULT_URL,
    DEFAULT_WAIT_TIMEOUT_MS,
    RANGES,
    ConnectionSpec,
    connection_spec,
    parse_sentinels,
    spell,
)
from .connection import check_url as check_url  # the CLI's (and AckingBatchWriter's) URL check
from .errors import ConfigError
from .ids import StreamId
from .keys import glob_matches
from .option_values import (  # the table's parsers; cli imports starting_position from here
    Parser,
    PerStream,
    batch_bound,
    boolean,
    choice,
    client_setting,
    duration,
    existing_file,
    key_name,
    one_stream,
    optional_name,
    parse_min_id,
    per_stream,
    provider_path,
    secret,
    secret_file,
    starting_position,
    stream_list,
    text,
    timestamp_bound,
    unread_streams,
    url,
    value_schema,
    whole,
)

log = logging.getLogger("spark_eventbus")

BATCH, STREAMING, SINK, ACKING = "batch", "streaming", "sink", "acking"
READS = frozenset({BATCH, STREAMING})
ALL = frozenset({BATCH, STREAMING, SINK, ACKING})
_MODE_TEXT = {BATCH: "batch reads", STREAMING: "streaming reads", SINK: "writes",
              ACKING: "AckingBatchWriter"}

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
# Rows per sink chunk (one transaction); the cap keeps one EXEC well under 50 ms of Redis time.
MAX_CHUNK_SIZE = 10_000
# The options Spark itself puts into a data source's options, read off Spark 4.3's own code
# (the classes' bytecode in pyspark/jars; the Scala source names the same calls), and checked on
# the installed Spark by tests/integration/test_spark_options.py.
# They are Spark's, not the user's: accepted silently in every mode, never validated here.
#  * path: DataFrameReader.load(path), DataStreamReader.load(path), DataFrameWriter.save(path),
#    DataStreamWriter.start(path) (classic: extraOptions + ("path" -> path)); Spark Connect's
#    SparkConnectPlanner does the same for a client's load/save/start with a path.
#  * paths: DataSourceV2Utils.getOptionsWithPaths, for load(path1, path2, ...).
#  * checkpointLocation: DataStreamWriter.option("checkpointLocation", ...) — set by users and
#    by Declarative Pipelines for every flow (pipelines.graph.SinkWrite.startStream,
#    StreamingTableWrite.startStream: the pipeline's own checkpoint storage).
#  * queryName: DataStreamWriter.queryName(name) is extraOptions + ("queryName" -> name), so it
#    reaches the sink's options whenever a query is named — by a user, by a Spark Connect
#    client (SparkConnectPlanner calls queryName), and by Declarative Pipelines, which names
#    every flow's query (SinkWrite.startStream: writeStream.queryName(displayName)).
#  * __v1_save_as_table_overwrite: DataFrameWriter.saveAsTable(...) with mode overwrite.
# Lower case, as option keys are compared (Spark's options are case-insensitive).
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname",
                           "__v1_save_as_table_overwrite"})
# Options with this prefix are redis-py's own settings (option_values.CLIENT_SETTINGS).
CLIENT_PREFIX = "redis."

# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    name: str  # as users spell it
    attr: str | tuple[str, ...]  # the field(s) it fills
    parse: Parser
    default: Any
    modes: frozenset[str]

    @property
    def key(self) -> str:
        return self.name.lower()


OPTIONS: tuple[Option, ...] = (
    Option("url", "url", url, DEFAULT_URL, ALL),
    Option("password", "password", secret, None, ALL),
    # credentials that rotate (docs/security.md)
    Option("passwordFile", "password_file", secret_file, None, ALL),
    Option("usernameFile", "username_file", secret_file, None, ALL),
    Option("credentialProvider", "credential_provider", provider_path, None, ALL),
    Option("tlsCaCert", "tls_ca_cert", existing_file, None, ALL),
    Option("tlsCertFile", "tls_cert_file", existing_file, None, ALL),
    Option("tlsSecretKeyFile", "tls_key_file", existing_file, None, ALL),
    # replicated Redis: Sentinel, failover, waiting for replicas (docs/high-availability.md)
    Option("sentinels", "sentinels", lambda raw, name: parse_sentinels(raw, f"option '{name}'")
           if raw.strip() else (), (), ALL),
    Option("sentinelMaster", "sentinel_master", optional_name, None, ALL),
    Option("sentinelUsername", "sentinel_username", secret, None, ALL),
    Option("sentinelPassword", "sentinel_password", secret, None, ALL),
    Option("failoverTimeoutMs", "failover_timeout_ms", duration(*RANGES["failoverTimeoutMs"]),
           DEFAULT_FAILOVER_TIMEOUT_MS, ALL),
    Option("waitReplicas", "wait_replicas", whole(*RANGES["waitReplicas"]), 0, ALL),
    Option("waitTimeoutMs", "wait_timeout_ms", duration(*RANGES["waitTimeoutMs"]),
           DEFAULT_WAIT_TIMEOUT_MS, ALL),
    Option("waitAof", "wait_aof", boolean, False, ALL),
    Option("stream", "streams", stream_list, (), READS),
    # reads without a group: from the replicas (Sentinel's, a cluster's, or the URL's node)
    Option("readFrom", "read_from_replicas", choice({"primary": False, "replica": True}), False,
           READS),
    Option("streamPattern", "stream_pattern", optional_name, None, READS),
    Option("discoveryIntervalMs", "discovery_interval_ms",
           duration(0, 2**31 - 1, "it is how often streams matching streamPattern are looked "
                    "for"),
           30_000, frozenset({STREAMING})),
    Option("stream", "stream", one_stream, None, frozenset({SINK})),
    Option("group", "group", optional_name, None, frozenset({STREAMING, ACKING})),
    Option("consumer", "consumer", key_name, None, frozenset({STREAMING})),
    Option("startingPosition", "starting_position", per_stream(starting_position, "latest"),
           PerStream("latest", default_given=False), frozenset({STREAMING})),
    Option("maxEntriesPerTrigger", "max_entries_per_trigger",
           whole(1, 10_000_000, "it bounds the entries of one micro-batch"), 100_000,
           frozenset({STREAMING})),
    Option("maxBytesPerTrigger", "max_bytes_per_trigger",
           whole(1, 2**40, "it bounds the bytes (field names + values) of one micro-batch; "
                 "leave it out for no byte bound"), None, frozenset({STREAMING})),
    Option("minEntriesPerTrigger", "min_entries_per_trigger",
           whole(1, 10_000_000, "a batch waits for that many entries, at most "
                 "maxTriggerDelay; leave it out to start batches at once"), None,
           frozenset({STREAMING})),
    Option("maxTriggerDelay", "max_trigger_delay_ms",
           duration(0, 2**63 - 1, "it is the longest a batch waits for minEntriesPerTrigger"),
           15 * 60_000,
           frozenset({STREAMING})),
    Option("trimAcked", "trim_acked", boolean, False, frozenset({STREAMING})),
    # acks as XACKDEL … ACKED where the server has it (Redis >= 8.2): docs/redis-8.md
    Option("deleteAtAck", "delete_at_ack", boolean, False, frozenset({STREAMING})),
    Option("trimIntervalMs", "trim_interval_ms",
           duration(0, 2**31 - 1, "it is the least time between two trims of trimAcked"),
           10_000,
           frozenset({STREAMING})),
    Option("numPartitions", "num_partitions",
           whole(1, 10_000, "it is the number of Spark partitions per batch"), 2,
           READS),
    Option("claimMinIdleMs", "claim_min_idle_ms",
           duration(0, 2**31 - 1, "make it longer than your slowest batch"), 60_000,
           frozenset({STREAMING})),
    Option("reclaimMaxEntries", "reclaim_max_entries",
           whole(0, 100_000, "use 0 to turn reclaiming off"), 1_000, frozenset({STREAMING})),
    Option("maxDeliveries", "max_deliveries",
           whole(0, 1_000_000, "use 0 to turn dead-lettering of poison entries off"), 0,
           frozenset({STREAMING})),
    Option("deadLetterStream", "dead_letter_stream", key_name, None,
           frozenset({STREAMING, SINK, ACKING})),
    Option("ackBatchSize", "ack_batch_size",
           whole(1, 100_000, "it is the number of IDs per XACK call"), 1000,
           frozenset({ACKING})),
    Option("ackMode", "ack_mode", choice({m: m for m in ("commit", "manual", "none")}),
           "commit", frozenset({STREAMING})),
    Option("failOnDataLoss", "fail_on_data_loss", boolean, True, frozenset({STREAMING})),
    # OpenTelemetry (spark_eventbus/telemetry.py): the MeterProvider of the process Spark runs
    # the source in
    Option("metricsProvider", "metrics_provider", provider_path, None, frozenset({STREAMING})),
    Option("valueField", "value_field", text, "payload", READS),
    Option("valueSchema", "value_schema", value_schema, None, READS),
    Option("fieldsType", "fields_binary", choice({"string": False, "binary": True}), False,
           READS),
    Option("startId", "start_id", per_stream(batch_bound("start"), "-"), PerStream("-"),
           frozenset({BATCH})),
    Option("endId", "end_id", per_stream(batch_bound("end"), "+"), PerStream("+"),
           frozenset({BATCH})),
    # batch reads: WHERE on stream, id, timestamp narrows the XRANGEs (spark_eventbus/pushdown.py;
    # Spark calls it only with spark.sql.python.filterPushdown.enabled)
    Option("filterPushdown", "filter_pushdown", boolean, False, frozenset({BATCH})),
    # Kafka's names: the first entry at or after a time, up to (not including) a time
    Option("startingTimestamp", "starting_timestamp", per_stream(timestamp_bound("start"), "-"),
           None, frozenset({BATCH})),
    Option("endingTimestamp", "ending_timestamp", per_stream(timestamp_bound("end"), "+"),
           None, frozenset({BATCH})),
    # sink
    Option("maxLen", "max_len",
           whole(1, 2**63 - 1, "it is the number of entries to keep; leave it out to keep all"),
           None, frozenset({SINK})),
    Option("minId", ("min_id", "min_age_ms"), lambda raw, _: parse_min_id(raw), (None, None),
           frozenset({SINK})),
    Option("trimApproximate", "trim_approximate", boolean, True, frozenset({SINK})),
    # Redis's deletion policies of XTRIM: keepref (its default) or acked (Redis >= 8.2)
    Option("trimPolicy", "trim_acked_only", choice({"keepref": False, "acked": True}), False,
           frozenset({SINK})),
    Option("maxPayloadBytes", "max_payload_bytes",
           whole(1, 512 * 2**20, "it is the largest entry (field names + values, bytes) "
                 "written"), DEFAULT_MAX_PAYLOAD_BYTES, frozenset({SINK})),
    Option("idempotent", "idempotent", boolean, True, frozenset({SINK})),
    Option("chunkSize", "chunk_size",
           whole(1, MAX_CHUNK_SIZE, "it is the number of rows per Redis call; larger calls "
                 "block Redis longer"), 1000, frozenset({SINK})),
    Option("writeId", "write_id", key_name, None, frozenset({SINK})),
    Option("batchId", "batch_id",
           whole(0, 2**63 - 1, "pass the batch_id that foreachBatch gives the function"),
           None, frozenset({SINK})),
)
_SPELLING = {o.key: o.name for o in OPTIONS}
# Each option's keyword-argument spelling (snake_case, :func:`.connection.spell`) -> its key.
_KEYWORDS = {spell(o.name, "keyword"): o.key for o in OPTIONS}


def spelled(key: str) -> str:
    """An option's name as users spell it (``maxentriespertrigger`` → ``maxEntriesPerTrigger``)."""
    return _SPELLING.get(key, key)


def option_key(name: str) -> str:
    """The option a keyword argument names: an option's name (any case) or its snake_case
    (``dead_letter_stream`` → ``deadletterstream``); anything else as it is (then unknown)."""
    return _KEYWORDS.get(name, name.lower())


def _unknown(keys: list[str], raw: Mapping[str, Any], family: frozenset[str]) -> str:
    """The error of options the connector does not have (a typo would otherwise be ignored,
    and e.g. a misspelt ``startingPosition`` would create the group at ``latest`` for good).
    Spark may pass the keys lower-cased: they are shown as they came."""
    spelled_as = {str(k).lower(): str(k) for k in raw}
    names = sorted({o.name for o in OPTIONS if o.modes & family})
    parts = []
    for key in keys:
        # an option it begins (maxEntries: maxEntriesPerTrigger), else the closest spelling
        close = sorted((k for k in _SPELLING if k.startswith(key)), key=len)[:1] or \
            difflib.get_close_matches(key, list(_SPELLING), n=1, cutoff=0.6)
        hint = f" (did you mean {spelled(close[0])!r}?)" if close else ""
        parts.append(f"{spelled_as.get(key, key)!r}{hint}")
    what = "reads" if family == READS else _MODE_TEXT[min(family)]
    return (f"unknown option{'s' if len(parts) > 1 else ''} {', '.join(parts)}: spark-eventbus "
            f"has no such option. The options of {what}: {', '.join(names)} (the README's "
            "option tables say what each does).")


def _parse(raw: Mapping[str, Any], mode: str, family: frozenset[str], warn: bool
           ) -> tuple[dict[str, Any], set[str]]:
    """Values of every option of ``family`` (defaults where not given) and the keys given.

    Every option of the family is validated even where ``mode`` ignores it, so that a bad value
    fails as early as possible (Spark's ``schema()`` cannot tell a batch from a streaming read);
    options ``mode`` ignores are warned about.
    """
    given = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    client = tuple(client_setting(key[len(CLIENT_PREFIX):], value)
                   for key, value in sorted(given.items()) if key.startswith(CLIENT_PREFIX))
    given = {k: v for k, v in given.items() if not k.startswith(CLIENT_PREFIX)}
    rows = [o for o in OPTIONS if o.modes & family]
    unknown = [key for key in sorted(given) if key not in _SPELLING
               and key not in SPARK_OPTIONS and not key.startswith("spark.")]
    if unknown:
        raise ConfigError(_unknown(unknown, raw, family))
    if warn:
        for key in sorted(given):
            if key in SPARK_OPTIONS or key.startswith("spark."):
                continue
            if not any(o.key == key and mode in o.modes for o in rows):
                # an option of the family's other mode, or of writes on a read ("reads")
                where = _MODE_TEXT[mode] if any(o.key == key for o in rows) else (
                    "reads" if mode in READS else _MODE_TEXT[mode])
                log.warning("spark-eventbus: option '%s' has no effect on %s and is ignored.",
                            spelled(key), where)
    values: dict[str, Any] = {}
    for o in rows:
        value = o.parse(given[o.key], o.name) if o.key in given else o.default
        if mode not in o.modes:
            value = o.default  # validated above, ignored in this mode
        if isinstance(o.attr, tuple):
            values.update(zip(o.attr, value, strict=True))
        else:
            values[o.attr] = value
    values["client_settings"] = client
    return values, set(given)


def connection_of(values: Mapping[str, Any], style: str = "option") -> ConnectionSpec:
    """The :class:`ConnectionSpec` of settings named as the fields of :class:`_Connected` (as
    :func:`.connection.connection_spec` names them: parsed option values, or the CLI's parsed
    flags, ``--tls-key-file`` being ``tls_key_file``): the one place settings become a spec,
    and where the rules across them are checked (TLS files, the Sentinel pair, a unix URL, the
    ranges), before any task; messages spell the settings in ``style``."""
    return connection_spec(**{name: values[name] for name in _SPEC_FIELDS
                              if name != "client_settings"},
                           client_settings=values.get("client_settings", ()), style=style)


# -- reads ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Connected:
    """Where Redis is, as both readers and writers take it (options url, password, tls*,
    sentinel*, failoverTimeoutMs, wait*)."""

    url: str
    password: str | None = field(repr=False)
    tls_ca_cert: str | None
    tls_cert_file: str | None
    tls_key_file: str | None = field(repr=False)
    sentinels: tuple[tuple[str, int], ...]
    sentinel_master: str | None
    sentinel_username: str | None
    sentinel_password: str | None = field(repr=False)
    failover_timeout_ms: int
    wait_replicas: int
    wait_timeout_ms: int
    wait_aof: bool
    password_file: str | None
    username_file: str | None
    credential_provider: str | None
    client_settings: tuple[tuple[str, Any], ...]  # options redis.* (connection.ConnectionSpec)

    @property
    def connection(self) -> ConnectionSpec:
        return connection_of({name: getattr(self, name) for name in _SPEC_FIELDS})


_SPEC_FIELDS = tuple(f.name for f in fields(_Connected))


@dataclass(frozen=True)
class ReaderOptions(_Connected):
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
    v, given = _parse(raw, STREAMING if streaming else BATCH, READS, warn)
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


# -- writes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkOptions(_Connected):
    """Validated sink options. Picklable (it travels to the executors with the writer).
    Built by :func:`parse_sink_options`; defaults live in :data:`OPTIONS`."""

    stream: str | None  # None: rows are routed by a 'stream' column (checked by the sink)
    dead_letter_stream: str | None
    max_len: int | None
    min_id: str | None  # a stream ID ...
    min_age_ms: int | None  # ... or a retention age: MINID = server time - age
    trim_approximate: bool
    trim_acked_only: bool  # trimPolicy=acked: never an entry some group has not acked
    max_payload_bytes: int
    idempotent: bool
    chunk_size: int
    # Batch writes inside foreachBatch: a name for this write, unique within the batch
    # function; with the streaming query's id and batch id (from Spark) it makes a replayed
    # batch idempotent too.
    write_id: str | None
    # Under Spark Connect a foreachBatch write's tasks do not see the streaming batch id: the
    # function passes it (with writeId unique to the query).
    batch_id: int | None

    @property
    def trims(self) -> bool:
        return self.max_len is not None or self.min_id is not None or self.min_age_ms is not None


def parse_sink_options(raw: Mapping[str, Any], *, warn: bool = True) -> SinkOptions:
    """Validate ``raw`` Spark options (any key case) of a write into :class:`SinkOptions`.

    Runs on the driver before any task. ``stream`` may be absent here: the DataFrame can route
    rows with a ``stream`` column (checked against the schema by the sink).
    """
    v, _ = _parse(raw, SINK, frozenset({SINK}), warn)
    connection_of(v)
    if not v["idempotent"] and (v["wait_replicas"] > 0 or v["wait_aof"]):
        raise ConfigError("options 'waitReplicas'/'waitAof' need option 'idempotent' = true: "
                          "the wait confirms a task's chunks by their idempotency markers on "
                          "the primary it reaches. Drop 'idempotent' (it defaults to true).")
    if v["batch_id"] is not None and v["write_id"] is None:
        raise ConfigError(f"option 'batchId' = {v['batch_id']} works with option 'writeId' "
                          "only (it names the write whose batch it is); add writeId.")
    if v["trim_acked_only"] and v["max_len"] is None and v["min_id"] is None \
            and v["min_age_ms"] is None:
        raise ConfigError("option 'trimPolicy' = 'acked' says how the sink trims, and it trims "
                          "nothing: add option 'maxLen' or 'minId'.")
    if v["dead_letter_stream"] is not None and v["dead_letter_stream"] == v["stream"]:
        raise ConfigError(
            f"option 'deadLetterStream' = {v['dead_letter_stream']!r} is also the target "
            "'stream'; use a separate key such as 'orders:dlq'.")
    return SinkOptions(**v)


# -- AckingBatchWriter ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AckingOptions(_Connected):
    """Validated settings of an :class:`~spark_eventbus.AckingBatchWriter`. Built by
    :func:`parse_acking_options`; defaults live in :data:`OPTIONS`."""

    group: str
    dead_letter_stream: str | None
    ack_batch_size: int


def _as_text(value: Any) -> Any:
    """A keyword argument's value as an option's text: bytes decoded, booleans as
    ``true``/``false``, a list of ``(host, port)`` pairs (``sentinels``) as ``host:port,…``;
    anything else as it is (``str()`` of it is parsed)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(":".join(map(str, x)) if isinstance(x, tuple | list) else str(x)
                        for x in value)
    return value


def parse_acking_options(options: Mapping[str, Any], settings: Mapping[str, Any]
                         ) -> AckingOptions:
    """Validate an ``AckingBatchWriter``'s settings into :class:`AckingOptions`: ``options``
    by option name in any case (the reader's options dict: those of other modes are left
    out), and ``settings`` (keyword arguments, by option name or in snake_case:
    :func:`option_key`), which win and must all apply."""
    def applies(key: str) -> bool:
        return key not in _SPELLING or any(o.key == key and ACKING in o.modes for o in OPTIONS)

    given = {option_key(str(k)): _as_text(val) for k, val in settings.items()}
    other = sorted(spelled(k) for k in given if not applies(k))
    if other:
        raise ConfigError(
            f"option{'s' if len(other) > 1 else ''} {', '.join(map(repr, other))} "
            f"{'do' if len(other) > 1 else 'does'} not apply to AckingBatchWriter, which acks "
            "the rows' 'stream' and 'id' columns: drop "
            f"{'them' if len(other) > 1 else 'it'}.")
    given = {**{k: _as_text(val) for k, val in ((str(k).lower(), val)
                                                for k, val in options.items()) if applies(k)},
             **given}
    v, _ = _parse(given, ACKING, frozenset({ACKING}), warn=False)
    connection_of(v)
    if v["group"] is None:
        raise ConfigError("option 'group' is required: the consumer group whose entries are "
                          "acked (the reader's 'group'), e.g. group='billing'.")
    return AckingOptions(**v)
