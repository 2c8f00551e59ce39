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

import logging
from dataclasses import dataclass
from typing import Any

from ..core.connection import (
    DEFAULT_FAILOVER_TIMEOUT_MS,
    DEFAULT_URL,
    DEFAULT_WAIT_TIMEOUT_MS,
    RANGES,
    parse_sentinels,
    spell,
)
from ..core.planning import MIN_SHARE
from .modes import (
    ACKING,
    ALL,
    BATCH,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_CHUNK_SIZE,
    READS,
    SINK,
    STREAMING,
)
from .values import (
    Parser,
    PerStream,
    batch_bound,
    boolean,
    choice,
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
    url,
    value_schema,
    whole,
)

log = logging.getLogger("spark_eventbus")

# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    name: str  # as users spell it
    attr: str | tuple[str, ...]  # the field(s) it fills
    parse: Parser
    default: Any
    modes: frozenset[str]
    help: str  # what it does, in one line (the CLI's help, docs/options.md)
    doc: str = ""  # more, for docs/options.md
    see: str = ""  # the page of docs/ that says more
    shown: str | None = None  # what docs say of the default where its value cannot (no bound…)
    values: str | None = None  # what it takes, where the parser cannot say (values.described)

    @property
    def key(self) -> str:
        return self.name.lower()


OPTIONS: tuple[Option, ...] = (
    Option("url", "url", url, DEFAULT_URL, ALL,
           help="where Redis is: a redis-py URL (`redis://host:port/db`)",
           doc="`rediss://` for TLS, `unix://` for a socket. With `sentinels` it gives only the "
               "scheme, the database and the data nodes' user and password; naming a cluster node "
               "makes it a Redis Cluster client.",
           see="security.md"),
    Option("password", "password", secret, None, ALL,
           help="the data nodes' password",
           doc="Never logged, never in offsets or progress; prefer it to a password inside `url` "
               "(Spark redacts options named `password` in plans, not URLs).",
           see="security.md"),
    Option("passwordFile", "password_file", secret_file, None, ALL,
           help="a file holding the password, read at every new connection",
           doc="For credentials that rotate (a mounted Secret). A refusal is retried with the file"
               " read again, within `failoverTimeoutMs`.",
           see="security.md#credentials-that-rotate"),
    Option("usernameFile", "username_file", secret_file, None, ALL,
           help="a file holding the ACL user name, read at every new connection",
           doc="Used with `passwordFile` or `credentialProvider` when the user rotates too.",
           see="security.md#credentials-that-rotate"),
    Option("credentialProvider", "credential_provider", provider_path, None, ALL,
           help="`module:callable` returning a redis-py `CredentialProvider`",
           doc="Asked at every new connection (IAM, Entra ID, a vault); imported once per process;"
               " a refusal is retried with fresh credentials within `failoverTimeoutMs`.",
           see="security.md#credentials-that-rotate"),
    Option("tlsCaCert", "tls_ca_cert", existing_file, None, ALL,
           help="PEM file of the CA that signed the server's certificate",
           doc="`rediss://` only, for a private CA; without it the system's CAs are trusted.",
           see="security.md"),
    Option("tlsCertFile", "tls_cert_file", existing_file, None, ALL,
           help="client certificate for mutual TLS",
           doc="`rediss://` only, with `tlsSecretKeyFile` (both or neither).",
           see="security.md"),
    Option("tlsSecretKeyFile", "tls_key_file", existing_file, None, ALL,
           help="client key for mutual TLS",
           doc="`rediss://` only, with `tlsCertFile`; its path is treated as a secret (keyword "
               "argument `tls_key_file`).",
           see="security.md"),
    Option("sentinels", "sentinels", lambda raw, name: parse_sentinels(raw, f"option '{name}'")
           if raw.strip() else (), (), ALL,
           help="replicated Redis under Sentinel: `host:port,host:port,…`",
           doc="The primary is asked of them (driver and executors); `url` then gives only the "
               "scheme, the database and the data nodes' user and password. The TLS options apply "
               "to the sentinels too.",
           see="high-availability.md", values="`host:port` pairs, separated by commas"),
    Option("sentinelMaster", "sentinel_master", optional_name, None, ALL,
           help="the name the sentinels monitor the primary by",
           doc="Required with `sentinels`.",
           see="high-availability.md"),
    Option("sentinelUsername", "sentinel_username", secret, None, ALL,
           help="the sentinels' user, if they require auth",
           doc="Never logged.",
           see="high-availability.md"),
    Option("sentinelPassword", "sentinel_password", secret, None, ALL,
           help="the sentinels' password, if they require auth",
           doc="Never logged.",
           see="high-availability.md"),
    Option("failoverTimeoutMs", "failover_timeout_ms", duration(*RANGES["failoverTimeoutMs"]),
           DEFAULT_FAILOVER_TIMEOUT_MS, ALL,
           help="how long a failing Redis is retried before a retriable error",
           doc="Connection errors and `READONLY` (a promotion, a restart, a demoted node; on a "
               "cluster also `CLUSTERDOWN`, `TRYAGAIN`, redirections) are retried with backoff; at"
               " most 5 s until the server has answered once, so a wrong address fails fast. Set "
               "it above Sentinel's `down-after-milliseconds` or the cluster's "
               "`cluster-node-timeout`, plus the failover time.",
           see="high-availability.md"),
    Option("waitReplicas", "wait_replicas", whole(*RANGES["waitReplicas"]), 0, ALL,
           help="replicas that must hold a write before it counts",
           doc="Reads: a batch's claim plan (and dead letters) reach this many replicas (`WAIT`) "
               "before Spark logs the batch, so it replays exactly after a failover. The sink and "
               "`AckingBatchWriter`: a task reports success only once this many replicas have its "
               "chunks and markers (its dead letters). Checked at start against the replicas "
               "online.",
           see="high-availability.md"),
    Option("waitTimeoutMs", "wait_timeout_ms", duration(*RANGES["waitTimeoutMs"]),
           DEFAULT_WAIT_TIMEOUT_MS, ALL,
           help="how long such a write waits for its replicas",
           doc="Fewer replicas fails retriably, naming how many acknowledged (fewer *online*, as "
               "after a failover, are waited for within `failoverTimeoutMs` first).",
           see="high-availability.md"),
    Option("waitAof", "wait_aof", boolean, False, ALL,
           help="also wait for the AOF fsync of the primary and `waitReplicas` replicas",
           doc="`WAITAOF`: Redis ≥ 7.2 or Valkey with `appendonly yes`; refused at start "
               "elsewhere.",
           see="high-availability.md"),
    Option("stream", "streams", stream_list, (), READS,
           help="the stream key to read, or several separated by commas",
           doc="Required unless `streamPattern` is given.",
           shown="required (or `streamPattern`)"),
    Option("readFrom", "read_from_replicas", choice({"primary": False, "replica": True}), False,
           READS,
           help="`replica`: a read without a group reads from replicas",
           doc="Reads go to replicas — Sentinel's, a cluster's (`READONLY`), or the replica `url` "
               "names — and a task waits for its replica to hold the batch before it reads (then "
               "the primary, or a retriable failure). A shard with no replica known is read at its"
               " primary, with a warning; sentinels with ACL users need `+sentinel|slaves`. "
               "Refused with `group`.",
           see="high-availability.md#reading-from-replicas-readfromreplica"),
    Option("streamPattern", "stream_pattern", optional_name, None, READS,
           help="every stream whose name matches this Redis glob, instead of `stream`",
           doc="As `SCAN MATCH` reads it (`tenant:*:events`), found with `SCAN … TYPE stream` (on "
               "every master of a cluster) at start and every `discoveryIntervalMs`. A stream "
               "found later joins at `startingPosition`; a deleted stream leaves, and entries its "
               "group had not read follow `failOnDataLoss`. The progress's `_eventbus.streams` "
               "says how many are subscribed.",
           see="../README.md#many-streams"),
    Option("discoveryIntervalMs", "discovery_interval_ms",
           duration(0, 2**31 - 1, "it is how often streams matching streamPattern are looked "
                    "for"),
           30_000, frozenset({STREAMING}),
           help="with `streamPattern`: how often streams are looked for again",
           doc="Between batches; 0: before every batch. A query also looks at every stream's group"
               " in full at least this often (or every `claimMinIdleMs`, if shorter).",
           see="../README.md#many-streams"),
    Option("stream", "stream", one_stream, None, frozenset({SINK}),
           help="the target stream of every row",
           doc="Or a `stream` column names each row's stream.",
           shown="— (or a `stream` column)"),
    Option("group", "group", optional_name, None, frozenset({STREAMING, ACKING}),
           help="the consumer group the query reads as (the writer acks for)",
           doc="Streaming: created with `MKSTREAM` if missing, at `startingPosition`; left out, "
               "the read keeps its positions in Spark's checkpoint (a read without a group). "
               "`AckingBatchWriter`: required, the reader's `group`.",
           see="../README.md#two-ways-of-reading-a-stream-as-a-consumer-group-or-without-one"),
    Option("consumer", "consumer", key_name, None, frozenset({STREAMING}),
           help="this query's consumer name; distinct per concurrent query on a group",
           doc="A second live query with the same stream, group and consumer is refused at start "
               "(the consumer lease).",
           see="guarantees.md", shown="`spark-<group>`"),
    Option("startingPosition", "starting_position", per_stream(starting_position, "latest"),
           PerStream("latest", default_given=False), frozenset({STREAMING}),
           help="where a new group (or a read without one) starts",
           doc="`latest` (`$`), `earliest`, a stream ID `<ms>-<seq>` (the group starts after it), "
               "or a time — epoch milliseconds or ISO-8601 (no zone: UTC) — at the first entry at "
               "or after it. Used only when the group is created (for one that exists, a warning "
               "names the `eventbus group seek` that moves it); without a group, resolved at the "
               "first trigger and kept in the checkpoint. Per stream as a JSON object by stream "
               'name, `{"orders": "earliest", "*": "latest"}`; a name the query does not read is '
               "refused."),
    Option("maxEntriesPerTrigger", "max_entries_per_trigger",
           whole(1, 10_000_000, "it bounds the entries of one micro-batch"), 100_000,
           frozenset({STREAMING}),
           help="the most entries in one micro-batch",
           doc="Also under `AvailableNow`; reclaimed entries count against it. Shared across "
               f"the streams with new entries: fair shares while each gets at least {MIN_SHARE}; "
               f"below that the streams take turns, each up to {MIN_SHARE} entries (or all it "
               "has), starting after the last stream the previous batch served, so a batch over "
               "many small streams takes each whole once rather than a little of every one."),
    Option("maxBytesPerTrigger", "max_bytes_per_trigger",
           whole(1, 2**40, "it bounds the bytes (field names + values) of one micro-batch; "
                 "leave it out for no byte bound"), None, frozenset({STREAMING}),
           help="the most entry bytes (field names + values) in one micro-batch",
           doc="With `maxEntriesPerTrigger` the tighter wins. An entry larger than the bound goes "
               "alone in its batch. New entries are sized (one `XRANGE`) before they are claimed; "
               "one reclaim call (up to 10 entries under this option) can pass the bound.",
           shown="— (no bound)"),
    Option("minEntriesPerTrigger", "min_entries_per_trigger",
           whole(1, 10_000_000, "a batch waits for that many entries, at most "
                 "maxTriggerDelay; leave it out to start batches at once"), None,
           frozenset({STREAMING}),
           help="a batch starts only when this many new entries are available",
           doc="Or when `maxTriggerDelay` has passed since the last batch; never waits under "
               "`AvailableNow`; at most `maxEntriesPerTrigger`.",
           shown="— (off)"),
    Option("maxTriggerDelay", "max_trigger_delay_ms",
           duration(0, 2**63 - 1, "it is the longest a batch waits for minEntriesPerTrigger"),
           15 * 60_000,
           frozenset({STREAMING}),
           help="with `minEntriesPerTrigger`: the longest a batch waits for it",
           doc="`15m`, `30s`, `500ms`, or milliseconds."),
    Option("trimAcked", "trim_acked", boolean, False, frozenset({STREAMING}),
           help="remove the entries every consumer group has acked, after the query's acks",
           doc="At most once per `trimIntervalMs`; never past a group that lags, never an entry "
               "pending anywhere (`XTRIM MINID ~`, whole stream nodes): a stream read only by "
               "connector queries stays bounded without producer `MAXLEN`.",
           see="operations.md#retention"),
    Option("deleteAtAck", "delete_at_ack", boolean, False, frozenset({STREAMING}),
           help="ack with `XACKDEL … ACKED` where the server has it (Redis ≥ 8.2)",
           doc="An entry leaves the stream as soon as every group has acked it. Costs Redis "
               "1.2–1.5× the CPU per entry of `XACK` + `trimAcked`'s pass; elsewhere (or for a "
               "user without `+xackdel`) a warning, and acks stay `XACK`.",
           see="redis-8.md"),
    Option("trimIntervalMs", "trim_interval_ms",
           duration(0, 2**31 - 1, "it is the least time between two trims of trimAcked"),
           10_000,
           frozenset({STREAMING}),
           help="the least time between two trims of `trimAcked`",
           doc="Each trim takes the streams the query acked since the last one, and every stream "
               "every 10th time.",
           see="operations.md#retention"),
    Option("numPartitions", "num_partitions",
           whole(1, 10_000, "it is the number of Spark partitions per batch"), 2,
           READS,
           help="Spark partitions (tasks) per batch",
           doc="A batch's ranges are packed by entries across its streams: tasks follow this and "
               "the data, not the number of streams."),
    Option("claimMinIdleMs", "claim_min_idle_ms",
           duration(0, 2**31 - 1, "make it longer than your slowest batch"), 60_000,
           frozenset({STREAMING}),
           help="idle time after which another consumer's pending entry is reclaimed",
           doc="Make it longer than two of your batches.",
           see="guarantees.md"),
    Option("reclaimMaxEntries", "reclaim_max_entries",
           whole(0, 100_000, "use 0 to turn reclaiming off"), 1_000, frozenset({STREAMING}),
           help="reclaimed entries per batch",
           doc="0 turns reclaiming off.",
           see="guarantees.md"),
    Option("maxDeliveries", "max_deliveries",
           whole(0, 1_000_000, "use 0 to turn dead-lettering of poison entries off"), 0,
           frozenset({STREAMING}),
           help="reclaimed entries delivered more often than this go to `deadLetterStream`",
           doc="0 (the default) turns it off; needs `deadLetterStream`.",
           see="guarantees.md", shown="0 (off)"),
    Option("deadLetterStream", "dead_letter_stream", key_name, None,
           frozenset({STREAMING, SINK, ACKING}),
           help="where poison entries (reads) or rows that cannot be written (sink, "
                "`AckingBatchWriter`) go",
           doc="Reads: required with `maxDeliveries`. Sink: rows too large, without a target, or "
               "not encodable. `AckingBatchWriter`: malformed rows; without it they fail the "
               "batch. Each dead letter carries its reason in `dlq.*` fields.",
           see="operations.md"),
    Option("ackBatchSize", "ack_batch_size",
           whole(1, 100_000, "it is the number of IDs per XACK call"), 1000,
           frozenset({ACKING}),
           help="IDs per `XACK` of the `AckingBatchWriter`"),
    Option("ackMode", "ack_mode", choice({m: m for m in ("commit", "manual", "none")}),
           "commit", frozenset({STREAMING}),
           help="when the reader acks",
           doc="`commit`: after Spark commits the batch; `manual`: never (the `AckingBatchWriter` "
               "will); `none`: never.",
           see="guarantees.md"),
    Option("failOnDataLoss", "fail_on_data_loss", boolean, True, frozenset({STREAMING}),
           help="entries lost before they were read fail the query (`true`) or are counted and "
                "skipped",
           doc="Entries trimmed, deleted or lost with a failed-over primary: fail (`eventbus group"
               " accept-loss` moves past one such batch) or warn, count in `lostEntries`, ack and "
               "skip (`false`). Without a group the task that reads the range counts them.",
           see="data-loss.md"),
    # OpenTelemetry: group/telemetry.py
    Option("metricsProvider", "metrics_provider", provider_path, None, frozenset({STREAMING}),
           help="`module:callable` returning an OpenTelemetry `MeterProvider`",
           doc="Extra `[otel]`: entries behind, pending, lag, claimed… per trigger, with bounded "
               "per-stream series.",
           see="operations.md#metrics-opentelemetry-and-a-prometheus-scrape"),
    Option("valueField", "value_field", text, "payload", READS,
           help="the field parsed with `valueSchema`"),
    Option("valueSchema", "value_schema", value_schema, None, READS,
           help="parse `valueField` as JSON into column `value`",
           doc='DDL (`"id BIGINT, tags ARRAY<STRING>"`) or `StructType.json()`; an entry that does'
               " not parse gets NULL and the reason in `error`."),
    Option("fieldsType", "fields_binary", choice({"string": False, "binary": True}), False,
           READS,
           help="`binary` keeps field values as raw bytes",
           doc="For binary-safe payloads; column `fields` is then `MAP<STRING, BINARY>`."),
    Option("startId", "start_id", per_stream(batch_bound("start"), "-"), PerStream("-"),
           frozenset({BATCH}),
           help="batch reads: the first entry of the range read",
           doc="`-`/`earliest`, a stream ID, or a time — epoch milliseconds or ISO-8601 — with the"
               " entries of that millisecond; per stream as a JSON object by stream name (`*`: the"
               " others)."),
    Option("endId", "end_id", per_stream(batch_bound("end"), "+"), PerStream("+"),
           frozenset({BATCH}),
           help="batch reads: the last entry of the range read (included)",
           doc="`+`/`latest`, a stream ID, or a time with the entries of that millisecond; per "
               "stream as a JSON object by stream name."),
    # batch reads: reads/pushdown.py
    Option("filterPushdown", "filter_pushdown", boolean, False, frozenset({BATCH}),
           help="batch reads: a `where` on `timestamp`, `stream`, `id` narrows the `XRANGE`s",
           doc="A `where` on `timestamp` (`>`, `>=`, `<`, `<=`, `=`, `between`), `stream` (`=`, "
               "`isin`) and `id` asks Redis for that range only. Needs Spark's "
               "`spark.sql.python.filterPushdown.enabled=true` too: Spark refuses a read whose "
               "source takes filters while its conf is off (`DATA_SOURCE_PUSHDOWN_DISABLED`), so "
               "the option keeps every other batch read working with Spark's default. Every "
               "filter still runs in Spark. `id` is a string column (`\"9-0\" > \"10-0\"` as "
               "text): its `>`/`<` bound the range only where the stream's IDs all have as many "
               "millisecond digits as the filter's (any stream written since 2001 by `*`); "
               "`=`/`isin` always do."),
    Option("startingTimestamp", "starting_timestamp", per_stream(timestamp_bound("start"), "-"),
           None, frozenset({BATCH}),
           help="batch reads, Kafka's name: from the first entry at or after a time",
           doc="Epoch milliseconds or ISO-8601, or a JSON object by stream name; instead of "
               "`startId` (not with it)."),
    Option("endingTimestamp", "ending_timestamp", per_stream(timestamp_bound("end"), "+"),
           None, frozenset({BATCH}),
           help="batch reads, Kafka's name: up to (not including) a time",
           doc="Epoch milliseconds or ISO-8601, or a JSON object by stream name; instead of "
               "`endId` (not with it)."),
    # sink
    Option("maxLen", "max_len",
           whole(1, 2**63 - 1, "it is the number of entries to keep; leave it out to keep all"),
           None, frozenset({SINK}),
           help="trim the target stream to about this many entries",
           doc="With `trimApproximate` (the default) `~`, whole stream nodes.",
           see="operations.md#retention"),
    Option("minId", ("min_id", "min_age_ms"), lambda raw, _: parse_min_id(raw), (None, None),
           frozenset({SINK}),
           help="trim entries older than this ID or age",
           doc="A stream ID, or an age (`30m`, `90s`, `500ms`) measured against the Redis server's"
               " clock.",
           see="operations.md#retention",
           values="a stream ID, or an age: `7d`, `24h`, `30m`, `90s`, `500ms`"),
    Option("trimApproximate", "trim_approximate", boolean, True, frozenset({SINK}),
           help="`~` trimming (fast) or exact",
           see="operations.md#retention"),
    Option("trimPolicy", "trim_acked_only", choice({"keepref": False, "acked": True}), False,
           frozenset({SINK}),
           help="`keepref`: trim by `maxLen`/`minId` alone; `acked`: only what every group has "
                "acked",
           doc="`acked` is `XTRIM … ACKED` (Redis ≥ 8.2; always exact): a lagging group never "
               "loses what it has not read. A server without it is refused before anything is "
               "written.",
           see="redis-8.md"),
    Option("maxPayloadBytes", "max_payload_bytes",
           whole(1, 512 * 2**20, "it is the largest entry (field names + values, bytes) "
                 "written"), DEFAULT_MAX_PAYLOAD_BYTES, frozenset({SINK}),
           help="the largest entry written (field names + values)",
           doc="A larger row is dead-lettered (or fails the batch without `deadLetterStream`)."),
    Option("idempotent", "idempotent", boolean, True, frozenset({SINK}),
           help="chunk markers make a replayed batch add nothing twice",
           doc="`false` writes plain `XADD`s: faster, at least once.",
           see="guarantees.md"),
    Option("chunkSize", "chunk_size",
           whole(1, MAX_CHUNK_SIZE, "it is the number of rows per Redis call; larger calls "
                 "block Redis longer"), 1000, frozenset({SINK}),
           help="rows per transaction",
           doc="~2–4 ms of Redis time per 1,000 rows."),
    Option("writeId", "write_id", key_name, None, frozenset({SINK}),
           help="batch writes inside `foreachBatch`: makes a replayed batch idempotent",
           doc="A name for the writing job, stable across its restarts.",
           see="guarantees.md"),
    Option("batchId", "batch_id",
           whole(0, 2**63 - 1, "pass the batch_id that foreachBatch gives the function"),
           None, frozenset({SINK}),
           help="with `writeId` under Spark Connect: the `batch_id` foreachBatch passes",
           doc="Its tasks do not see it otherwise."),
)
SPELLING = {o.key: o.name for o in OPTIONS}
# Each option's keyword-argument spelling (snake_case, :func:`.connection.spell`) -> its key.
KEYWORDS = {spell(o.name, "keyword"): o.key for o in OPTIONS}


def spelled(key: str) -> str:
    """An option's name as users spell it (``maxentriespertrigger`` → ``maxEntriesPerTrigger``)."""
    return SPELLING.get(key, key)


def option_key(name: str) -> str:
    """The option a keyword argument names: an option's name (any case) or its snake_case
    (``dead_letter_stream`` → ``deadletterstream``); anything else as it is (then unknown)."""
    return KEYWORDS.get(name, name.lower())
