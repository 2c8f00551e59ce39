"""The writers' options: the sink's (:class:`SinkOptions`) and the AckingBatchWriter's
(:class:`AckingOptions`), from raw options or keyword arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .modes import ACKING, SINK
from .parsing import Connected, connection_of, parse_family
from .table import OPTIONS, SPELLING, option_key, spelled


@dataclass(frozen=True)
class SinkOptions(Connected):
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
    v, _ = parse_family(raw, SINK, frozenset({SINK}), warn)
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
class AckingOptions(Connected):
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
        return key not in SPELLING or any(o.key == key and ACKING in o.modes for o in OPTIONS)

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
    v, _ = parse_family(given, ACKING, frozenset({ACKING}), warn=False)
    connection_of(v)
    if v["group"] is None:
        raise ConfigError("option 'group' is required: the consumer group whose entries are "
                          "acked (the reader's 'group'), e.g. group='billing'.")
    return AckingOptions(**v)
