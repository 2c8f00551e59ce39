"""The reader's figures as OpenTelemetry metrics (the optional extra ``spark-eventbus[otel]``):
recorded on the driver at each trigger through the application's ``MeterProvider`` (the global
one: the application picks the exporter — OTLP, Prometheus, console). Without the
``opentelemetry`` package nothing is imported or recorded; with the API but no SDK configured,
its no-op provider records nothing. Never fails a query: a recording error is logged once.

Instruments (attributes ``redis.client.consumer_group`` and, within the bound below,
``redis.client.stream.name``, as redis-py names them):

* ``eventbus.stream.entries_behind`` (gauge, ``{entry}``): each group's lag as last reported
  (a stream whose lag the server does not know has no point; the total none while any is
  unknown, as progress's ``entriesBehind`` is null then);
  ``eventbus.stream.pending`` (gauge): its pending entries (the total by the same rule);
* ``redis.client.stream.lag`` (histogram, seconds): how old the entries of a batch are when it
  is planned, from their IDs' time — one observation per claimed range (its oldest entry) and
  per reclaimed entry, redis-py's instrument for stream consumers;
* ``eventbus.entries.claimed``, ``eventbus.entries.reclaimed``, ``eventbus.entries.dead_lettered``,
  ``eventbus.entries.lost`` (counters, ``{entry}``);
* ``eventbus.batch.planning.duration`` (histogram, seconds): ``latestOffset`` of a batch.

**Cardinality.** Per-stream series only for a query over at most :data:`STREAM_SERIES` streams
(an SDK keeps every series it has seen, so a changing "top N" would pile up); every instrument
also has a series without a stream name (the gauges' total over all streams), so a query over
10,000 streams makes one series per instrument and group.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._version import __version__
from ..core.factories import call_factory
from ..core.ids import StreamId
from ..core.offsets import StreamBatch
from ..errors import ConfigError
from ..redisio import GroupStats, total
from .loss_reports import SourceMetrics

log = logging.getLogger("spark_eventbus")

# Per-stream series at most per instrument (see the module's docstring).
STREAM_SERIES = 100
STREAM = "redis.client.stream.name"
GROUP = "redis.client.consumer_group"


class _Instruments:
    """The instruments, made once per process (an SDK keeps the first instrument of a name);
    the gauges observe every live reader's last report."""

    def __init__(self, meter: Any) -> None:
        self.readers: weakref.WeakSet[Telemetry] = weakref.WeakSet()
        meter.create_observable_gauge(
            "eventbus.stream.entries_behind", callbacks=[self._observe("behind")],
            unit="{entry}", description="Entries of the stream after the consumer group's "
            "position that no consumer has read yet (XINFO GROUPS lag)")
        meter.create_observable_gauge(
            "eventbus.stream.pending", callbacks=[self._observe("pending")], unit="{entry}",
            description="Entries delivered to the consumer group and not acked yet")
        self.lag = meter.create_histogram(
            "redis.client.stream.lag", unit="s", description="End-to-end lag per message, "
            "showing how stale are the messages when the application starts processing them.")
        self.claimed = meter.create_counter("eventbus.entries.claimed", unit="{entry}",
                                            description="New entries claimed into batches")
        self.reclaimed = meter.create_counter("eventbus.entries.reclaimed", unit="{entry}",
                                              description="Idle entries taken over into batches")
        self.dead_lettered = meter.create_counter(
            "eventbus.entries.dead_lettered", unit="{entry}",
            description="Entries the source moved to the dead-letter stream (maxDeliveries)")
        self.lost = meter.create_counter("eventbus.entries.lost", unit="{entry}",
                                         description="Entries gone before they were read")
        self.planning = meter.create_histogram("eventbus.batch.planning.duration", unit="s",
                                               description="Time to plan a batch (latestOffset)")

    def _observe(self, which: str) -> Any:
        def callback(_options: Any) -> Iterable[Any]:
            from opentelemetry.metrics import Observation
            rows = [row for t in list(self.readers) for row in t.gauge_rows(which)]
            return [Observation(value, attrs) for value, attrs in rows]
        return callback


_instruments: dict[str | None, _Instruments] = {}
_made = threading.Lock()


def _shared(provider: str | None) -> _Instruments | None:
    """The process's instruments on the global MeterProvider (``provider`` None) or on the
    one ``package.module:callable`` returns; None without OpenTelemetry."""
    with _made:
        got = _instruments.get(provider)
        if got is None:
            try:
                from opentelemetry import metrics
            except ImportError:
                if provider is not None:
                    raise ConfigError(
                        f"option 'metricsProvider' = {provider!r} needs OpenTelemetry where the "
                        "source runs: pip install 'spark-eventbus[otel]' (and the SDK and "
                        "exporter the provider uses).") from None
                return None
            source = metrics.get_meter_provider() if provider is None else _call(provider)
            got = _instruments[provider] = _Instruments(
                source.get_meter("spark_eventbus", __version__))
        return got


def _call(path: str) -> Any:
    """The MeterProvider ``package.module:callable`` returns (imported where it runs)."""
    provider = call_factory(path, "option 'metricsProvider'", "an OpenTelemetry MeterProvider")
    if not callable(getattr(provider, "get_meter", None)):
        raise ConfigError(f"option 'metricsProvider' = {path!r} returned a "
                          f"{type(provider).__name__}, not an OpenTelemetry MeterProvider.")
    return provider


class Telemetry:
    """One reader's recordings (one per :class:`~spark_eventbus.group.driver.ReaderDriver`)."""

    def __init__(self, group: str, provider: str | None = None) -> None:
        self.group = group
        self.shared = _shared(provider)
        self.enabled = self.shared is not None
        self._lock = threading.Lock()
        self._gauges: dict[str, list[tuple[int, dict[str, str]]]] = {"behind": [],
                                                                      "pending": []}
        self._seen = (0, 0)  # dead-lettered, lost entries already counted
        self._warned = False
        if self.shared is not None:
            self.shared.readers.add(self)

    def gauge_rows(self, which: str) -> list[tuple[int, dict[str, str]]]:
        with self._lock:
            return list(self._gauges[which])

    def _attrs(self, stream: str | None = None) -> dict[str, str]:
        return {GROUP: self.group} if stream is None else {GROUP: self.group, STREAM: stream}

    def planned(self, batches: Mapping[str, StreamBatch], seconds: float, streams: int) -> None:
        """A batch planned in ``seconds`` (``batches``: per stream; ``streams``: the query's)."""
        i = self.shared
        if i is None:
            return
        try:
            i.planning.record(seconds, self._attrs())
            now_ms = time.time() * 1000
            for name, b in batches.items():
                attrs = self._attrs(name if streams <= STREAM_SERIES else None)
                claimed = sum(c.count for c in b.chunks)
                if claimed:
                    i.claimed.add(claimed, attrs)
                if b.reclaimed:
                    i.reclaimed.add(len(b.reclaimed), attrs)
                for first in [c.first for c in b.chunks] + [i for i, _ in b.reclaimed]:
                    i.lag.record(max(0.0, (now_ms - StreamId.parse(first).ms) / 1000),
                                    attrs)
        except Exception as exc:
            self._warn(exc)

    def reported(self, names: Sequence[str], found: Sequence[GroupStats],
                 metrics: SourceMetrics) -> None:
        """A progress report: the gauges' values (per stream within :data:`STREAM_SERIES`, and
        the totals) and the run's dead-lettered and lost entries since the last report."""
        i = self.shared
        if i is None:
            return
        try:
            known = [(n, s) for n, s in zip(names, found, strict=True) if s.lag is not None]
            # per stream only for a query over at most STREAM_SERIES streams: an SDK keeps
            # every series it has seen, so "the most behind" would pile up over time
            top = known if len(names) <= STREAM_SERIES else []
            behind = [(s.lag or 0, self._attrs(n)) for n, s in top]
            pending = [(s.pending, self._attrs(n)) for n, s in top if s.pending is not None]
            for gauge, part in ((behind, [s.lag for s in found]),
                                (pending, [s.pending for s in found])):
                whole = total(part)
                if whole is not None:  # a total with an unknown part is unknown: left out
                    gauge.append((whole, self._attrs()))
            with self._lock:
                self._gauges = {"behind": behind, "pending": pending}
            dead, lost = metrics.dead_lettered, metrics.lost_entries
            if dead > self._seen[0]:
                i.dead_lettered.add(dead - self._seen[0], self._attrs())
            if lost > self._seen[1]:
                i.lost.add(lost - self._seen[1], self._attrs())
            self._seen = (max(dead, self._seen[0]), max(lost, self._seen[1]))
        except Exception as exc:
            self._warn(exc)

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("spark-eventbus: recording OpenTelemetry metrics failed (%s: %s); the "
                        "query goes on without them", type(exc).__name__, exc)
