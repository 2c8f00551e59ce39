"""Reader options: names, defaults and validation (driver side, before any task runs).

Every error names the option, echoes the value and says the fix. Options a mode ignores, and
unknown options, are warned about — never silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .errors import ConfigError, redact
from .ids import StreamId

log = logging.getLogger("spark_eventbus")

# Lower-case option names (Spark options are case-insensitive).
URL = "url"
PASSWORD = "password"
STREAM = "stream"
GROUP = "group"
CONSUMER = "consumer"
STARTING_POSITION = "startingposition"
MAX_ENTRIES_PER_TRIGGER = "maxentriespertrigger"
NUM_PARTITIONS = "numpartitions"
CLAIM_MIN_IDLE_MS = "claimminidlems"
RECLAIM_MAX_ENTRIES = "reclaimmaxentries"
MAX_DELIVERIES = "maxdeliveries"
DEAD_LETTER_STREAM = "deadletterstream"
ACK_MODE = "ackmode"
FAIL_ON_DATA_LOSS = "failondataloss"
VALUE_FIELD = "valuefield"
VALUE_SCHEMA = "valueschema"
FIELDS_TYPE = "fieldstype"
START_ID = "startid"
END_ID = "endid"

# How the user spells them, for messages.
_SPELLING = {
    name.lower(): name
    for name in (
        "url password stream group consumer startingPosition maxEntriesPerTrigger numPartitions "
        "claimMinIdleMs reclaimMaxEntries maxDeliveries deadLetterStream ackMode failOnDataLoss "
        "valueField valueSchema fieldsType startId endId"
    ).split()
}
STREAMING_ONLY = {
    GROUP, CONSUMER, STARTING_POSITION, MAX_ENTRIES_PER_TRIGGER, CLAIM_MIN_IDLE_MS,
    RECLAIM_MAX_ENTRIES, MAX_DELIVERIES, DEAD_LETTER_STREAM, ACK_MODE, FAIL_ON_DATA_LOSS,
}
BATCH_ONLY = {START_ID, END_ID}
# Spark itself may pass these; they are not ours to validate.
_SPARK_OPTIONS = {"path", "paths", "checkpointlocation", "__sparkinternal"}

DEFAULT_URL = "redis://localhost:6379/0"
ACK_MODES = ("commit", "manual", "none")
FIELDS_TYPES = ("string", "binary")


def spelled(name: str) -> str:
    return _SPELLING.get(name, name)


@dataclass(frozen=True)
class ReaderOptions:
    """Validated reader options. Picklable; holds the password only to build clients."""

    url: str = DEFAULT_URL
    password: str | None = field(default=None, repr=False)
    streams: tuple[str, ...] = ()
    group: str | None = None
    consumer: str | None = None
    starting_position: str = "latest"
    max_entries_per_trigger: int = 100_000
    num_partitions: int = 2
    claim_min_idle_ms: int = 60_000
    reclaim_max_entries: int = 1_000
    max_deliveries: int = 0
    dead_letter_stream: str | None = None
    ack_mode: str = "commit"
    fail_on_data_loss: bool = True
    value_field: str = "payload"
    value_schema: str | None = None
    fields_binary: bool = False
    start_id: str = "-"
    end_id: str = "+"

    @property
    def consumer_name(self) -> str:
        return self.consumer or f"spark-{self.group}"

    @property
    def reclaim_enabled(self) -> bool:
        # With ackMode=none every delivered entry stays pending forever, so "idle pending" no
        # longer means "abandoned": reclaiming would re-deliver everything ever read.
        return self.ack_mode != "none" and self.reclaim_max_entries > 0


def _int(opts: Mapping[str, str], name: str, default: int, lo: int, hi: int, fix: str) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        raise ConfigError(
            f"option '{spelled(name)}' = {raw!r} is invalid: expected a whole number from "
            f"{lo} to {hi}; {fix}."
        )
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"option '{spelled(name)}' = {raw!r} is invalid: use 'true' or 'false'.")


def _choice(opts: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in choices:
        raise ConfigError(
            f"option '{spelled(name)}' = {raw!r} is invalid: use one of {', '.join(choices)}."
        )
    return text


def _name(raw: str, option: str) -> str:
    text = raw.strip()
    if not text or any(c.isspace() for c in text):
        raise ConfigError(
            f"option '{option}' = {raw!r} is invalid: a Redis key or name must be non-empty "
            "and contain no white space."
        )
    return text


def _stream_id_option(opts: Mapping[str, str], name: str, default: str, extra: tuple[str, ...]
                      ) -> str:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if text in extra:
        return text
    StreamId.parse(text, what=f"option '{spelled(name)}' =")
    return text


def _warn_ignored(opts: Mapping[str, str], listing: str,
                  ignored: Callable[[str], str | None]) -> None:
    """Warn about unknown options (``listing`` names the known ones) and about options this
    mode ignores (``ignored(key)`` says which mode, e.g. "writes", or None)."""
    for key in sorted(opts):
        if key in _SPARK_OPTIONS or key.startswith("spark."):
            continue
        if key not in _SPELLING:
            log.warning("spark-eventbus: unknown option '%s' is ignored (%s).", key, listing)
        elif (where := ignored(key)) is not None:
            log.warning("spark-eventbus: option '%s' has no effect on %s and is ignored.",
                        spelled(key), where)


def _url(opts: Mapping[str, str], password: str | None) -> str:
    url = opts.get(URL, DEFAULT_URL).strip()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"option 'url' = {redact(url, [password])!r} is invalid: use redis://host:port/db, "
            "rediss://host:port/db for TLS, or unix:///path/to/socket."
        )
    return url


def parse_reader_options(raw: Mapping[str, str], *, streaming: bool, warn: bool = True
                         ) -> ReaderOptions:
    """Validate ``raw`` Spark options (any key case) into :class:`ReaderOptions`.

    Runs on the driver. Raises :class:`ConfigError` for invalid values; logs a warning for
    unknown options and for options the mode (streaming or batch) ignores.
    """
    opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    password = opts.get(PASSWORD) or None
    mode = "streaming" if streaming else "batch"

    def ignored(key: str) -> str | None:
        if key in SINK_ONLY:
            return "reads"
        if (streaming and key in BATCH_ONLY) or (not streaming and key in STREAMING_ONLY):
            return f"{mode} reads"
        return None

    if warn:
        _warn_ignored(opts, f"known options: {', '.join(sorted(_SPELLING.values()))}", ignored)
    url = _url(opts, password)

    stream_raw = opts.get(STREAM)
    if not stream_raw or not stream_raw.strip():
        raise ConfigError(
            "option 'stream' is required: name the Redis stream key to read, or several "
            "separated by commas, e.g. .option('stream', 'orders')."
        )
    streams = tuple(_name(s, "stream") for s in stream_raw.split(","))
    if len(set(streams)) != len(streams):
        raise ConfigError(f"option 'stream' = {stream_raw!r} names a stream twice; list each once.")

    group = opts.get(GROUP)
    if streaming and (group is None or not group.strip()):
        raise ConfigError(
            "option 'group' is required for streaming reads: name the consumer group this "
            "query reads as, e.g. .option('group', 'billing'). It is created if missing."
        )
    group = _name(group, "group") if group is not None and streaming else group
    consumer = opts.get(CONSUMER)
    if consumer is not None:
        consumer = _name(consumer, "consumer")

    ack_mode = _choice(opts, ACK_MODE, "commit", ACK_MODES)
    max_deliveries = _int(opts, MAX_DELIVERIES, 0, 0, 1_000_000,
                          "use 0 to turn dead-lettering of poison entries off")
    dead_letter = opts.get(DEAD_LETTER_STREAM)
    if dead_letter is not None:
        dead_letter = _name(dead_letter, "deadLetterStream")
    if streaming and max_deliveries > 0 and dead_letter is None:
        raise ConfigError(
            f"option 'maxDeliveries' = {max_deliveries} needs option 'deadLetterStream': name the "
            "stream that receives entries delivered too often, or set maxDeliveries to 0."
        )
    if streaming and dead_letter is not None and dead_letter in streams:
        raise ConfigError(
            f"option 'deadLetterStream' = {dead_letter!r} is also a source stream; "
            "use a separate key such as 'orders:dlq'."
        )
    if streaming and warn and ack_mode == "none":
        for key in (CLAIM_MIN_IDLE_MS, RECLAIM_MAX_ENTRIES, MAX_DELIVERIES):
            if key in opts:
                log.warning(
                    "spark-eventbus: option '%s' has no effect with ackMode=none: nothing is "
                    "acked, so every delivered entry stays pending and none is reclaimed.",
                    spelled(key))

    value_schema = opts.get(VALUE_SCHEMA)
    if value_schema is not None:
        from .schema import parse_value_schema  # local: keeps options importable on its own

        parse_value_schema(value_schema)  # raises ConfigError naming the option
    start_id = _stream_id_option(opts, START_ID, "-", ("-",))
    end_id = _stream_id_option(opts, END_ID, "+", ("+",))
    if start_id != "-" and end_id != "+" and StreamId.parse(start_id) > StreamId.parse(end_id):
        raise ConfigError(
            f"option 'startId' = {start_id!r} is after option 'endId' = {end_id!r}; "
            "swap them or widen the range."
        )

    return ReaderOptions(
        url=url,
        password=password,
        streams=streams,
        group=group,
        consumer=consumer,
        starting_position=_stream_id_option(
            opts, STARTING_POSITION, "latest", ("latest", "earliest", "$", "0")),
        max_entries_per_trigger=_int(opts, MAX_ENTRIES_PER_TRIGGER, 100_000, 1, 10_000_000,
                                     "it bounds the entries of one micro-batch"),
        num_partitions=_int(opts, NUM_PARTITIONS, 2, 1, 10_000,
                            "it is the number of Spark partitions per stream per batch"),
        claim_min_idle_ms=_int(opts, CLAIM_MIN_IDLE_MS, 60_000, 0, 2**31 - 1,
                               "make it longer than your slowest batch"),
        reclaim_max_entries=_int(opts, RECLAIM_MAX_ENTRIES, 1_000, 0, 100_000,
                                 "use 0 to turn reclaiming off"),
        max_deliveries=max_deliveries,
        dead_letter_stream=dead_letter,
        ack_mode=ack_mode,
        fail_on_data_loss=_bool(opts, FAIL_ON_DATA_LOSS, True),
        value_field=opts.get(VALUE_FIELD, "payload"),
        value_schema=value_schema,
        fields_binary=_choice(opts, FIELDS_TYPE, "string", FIELDS_TYPES) == "binary",
        start_id=start_id,
        end_id=end_id,
    )


# -- sink (df.writeStream.format("eventbus"), df.write.format("eventbus")) ----------------------

MAX_LEN = "maxlen"
MIN_ID = "minid"
TRIM_APPROXIMATE = "trimapproximate"
MAX_PAYLOAD_BYTES = "maxpayloadbytes"
IDEMPOTENT = "idempotent"
CHUNK_SIZE = "chunksize"
WRITE_ID = "writeid"

_SINK_SPELLING = {
    name.lower(): name
    for name in ("url password stream deadLetterStream maxLen minId trimApproximate "
                 "maxPayloadBytes idempotent chunkSize writeId").split()
}
SINK_ONLY = set(_SINK_SPELLING) - set(_SPELLING)
_SPELLING.update(_SINK_SPELLING)

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
# Rows per Lua call: ~2.5 µs of Redis time per row, so 1,000 rows block Redis ~3 ms and the
# 10,000 cap keeps every call well under the 50 ms budget of DESIGN §1.
DEFAULT_CHUNK_SIZE = 1000
MAX_CHUNK_SIZE = 10_000

_AGE_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options. Picklable (it travels to the executors with the writer)."""

    url: str = DEFAULT_URL
    password: str | None = field(default=None, repr=False)
    stream: str | None = None
    dead_letter_stream: str | None = None
    max_len: int | None = None
    min_id: str | None = None  # a stream ID ...
    min_age_ms: int | None = None  # ... or a retention age: MINID = server time - age
    trim_approximate: bool = True
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    idempotent: bool = True
    chunk_size: int = DEFAULT_CHUNK_SIZE
    # Batch writes inside foreachBatch: a name for this write, unique within the batch
    # function; with the streaming query's id and batch id (from Spark) it makes a replayed
    # batch idempotent too.
    write_id: str | None = None

    @property
    def trims(self) -> bool:
        return self.max_len is not None or self.min_id is not None or self.min_age_ms is not None


def parse_min_id(raw: str) -> tuple[str | None, int | None]:
    """``minId``: a stream ID (``1700000000000-0`` or ``1700000000000``) or an age such as
    ``7d``, ``24h``, ``30m``, ``90s``, ``500ms`` (entries older than that are trimmed)."""
    text = raw.strip().lower()
    for unit in ("ms", "s", "m", "h", "d"):
        number = text[: -len(unit)]
        if text.endswith(unit) and number.isdigit():
            age = int(number) * _AGE_UNITS[unit]
            if age <= 0:
                break
            return None, age
    try:
        return str(StreamId.parse(text if "-" in text else f"{text}-0",
                                  what="option 'minId' =")), None
    except ConfigError:
        raise ConfigError(
            f"option 'minId' = {raw!r} is invalid: use a stream ID such as '1700000000000-0', "
            "or a positive age such as '7d', '24h', '30m', '90s' or '500ms' to keep entries "
            "newer than that.") from None


def parse_sink_options(raw: Mapping[str, str], *, warn: bool = True) -> SinkOptions:
    """Validate ``raw`` Spark options (any key case) of a write into :class:`SinkOptions`.

    Runs on the driver before any task. ``stream`` may be absent here: the DataFrame can route
    rows with a ``stream`` column (checked against the schema by the sink).
    """
    opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    password = opts.get(PASSWORD) or None
    if warn:
        _warn_ignored(opts, f"sink options: {', '.join(sorted(_SINK_SPELLING.values()))}",
                      lambda key: None if key in _SINK_SPELLING else "writes")
    url = _url(opts, password)
    stream = opts.get(STREAM)
    if stream is not None:
        if "," in stream:
            raise ConfigError(
                f"option 'stream' = {stream!r} is invalid for writes: name one stream; to route "
                "rows to several streams, add a string column named 'stream'.")
        stream = _name(stream, "stream")
    dead_letter = opts.get(DEAD_LETTER_STREAM)
    if dead_letter is not None:
        dead_letter = _name(dead_letter, "deadLetterStream")
        if dead_letter == stream:
            raise ConfigError(
                f"option 'deadLetterStream' = {dead_letter!r} is also the target 'stream'; use "
                "a separate key such as 'orders:dlq'.")
    max_len = _int(opts, MAX_LEN, -1, 1, 2**63 - 1,
                   "it is the number of entries to keep; leave it out to keep all")
    min_id, min_age = parse_min_id(opts[MIN_ID]) if MIN_ID in opts else (None, None)
    write_id = opts.get(WRITE_ID)
    if write_id is not None:
        write_id = _name(write_id, "writeId")
    return SinkOptions(
        url=url,
        password=password,
        stream=stream,
        dead_letter_stream=dead_letter,
        max_len=None if max_len < 0 else max_len,
        min_id=min_id,
        min_age_ms=min_age,
        trim_approximate=_bool(opts, TRIM_APPROXIMATE, True),
        max_payload_bytes=_int(opts, MAX_PAYLOAD_BYTES, DEFAULT_MAX_PAYLOAD_BYTES, 1, 512 * 2**20,
                               "it is the largest entry (field names + values, bytes) written"),
        idempotent=_bool(opts, IDEMPOTENT, True),
        chunk_size=_int(opts, CHUNK_SIZE, DEFAULT_CHUNK_SIZE, 1, MAX_CHUNK_SIZE,
                        "it is the number of rows per Redis call; larger calls block Redis "
                        "longer"),
        write_id=write_id,
    )
