"""OpenTelemetry metrics of the reader (issue 37): read back with the SDK's in-memory reader
against Redis's own counts; per-stream series bounded at 10,000 streams' worth; nothing
recorded or imported without OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_eventbus.core.offsets import BatchOffset
from spark_eventbus.group.telemetry import GROUP, STREAM, STREAM_SERIES
from tests.integration.helpers import driver_reader, produce

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def otel() -> Iterator[InMemoryMetricReader]:
    """The process's global MeterProvider (set once per process, as an application does),
    read in memory."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    yield reader


def _points(reader: InMemoryMetricReader, name: str, group: str) -> list[Any]:
    data = reader.get_metrics_data()
    out: list[Any] = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    out += [p for p in m.data.data_points
                            if p.attributes.get(GROUP) == group]
    return out


def _by_stream(points: list[Any]) -> dict[str | None, Any]:
    return {p.attributes.get(STREAM): p for p in points}


@pytest.mark.server
def test_the_instruments_match_what_redis_counts(otel, redis_server, names):
    r = redis_server.client()
    streams = [f"{names['stream']}-{k}" for k in range(3)]
    for s, n in zip(streams, (5, 7, 0), strict=True):
        produce(r, s, n) if n else r.xadd(s, {"n": "x"}) and r.xtrim(s, maxlen=0)
    group = names["group"]
    reader = driver_reader(redis_server.url, ",".join(streams), group)
    start = reader.initialOffset()
    batch = BatchOffset.from_json(reader.latestOffset(start, ReadMaxRows(8))).streams
    reader.driver.prefetch.stop()  # the pre-claim of the next batch done: Redis holds still
    reader.reportLatestOffset()
    xinfo = {s: r.xinfo_groups(s)[0] for s in streams}
    behind = _by_stream(_points(otel, "eventbus.stream.entries_behind", group))
    assert {s: behind[s].value for s in streams} == {s: int(xinfo[s]["lag"]) for s in streams}
    assert behind[None].value == sum(int(g["lag"]) for g in xinfo.values())
    pending = _by_stream(_points(otel, "eventbus.stream.pending", group))
    assert pending[None].value == sum(int(g["pending"]) for g in xinfo.values())
    claimed = _by_stream(_points(otel, "eventbus.entries.claimed", group))
    # the batch's entries (what the pre-claim took for the next batch counts when it ships)
    assert {s: p.value for s, p in claimed.items()} == {s: b.count for s, b in batch.items()}
    assert sum(p.value for p in claimed.values()) == 8
    lag = _points(otel, "redis.client.stream.lag", group)
    assert sum(p.count for p in lag) >= 2 and all(p.min >= 0 for p in lag)  # a range a stream
    planning = _points(otel, "eventbus.batch.planning.duration", group)
    assert sum(p.count for p in planning) == 1 and planning[0].sum > 0
    reader.stop()


def test_series_per_stream_are_bounded(otel, redis_server, names):
    """150 streams, more than the bound: every instrument has one series, without a stream
    name (an SDK keeps each series it has seen: per-stream series would pile up)."""
    r = redis_server.client()
    streams = [f"{names['stream']}-{k:03d}" for k in range(150)]
    pipe = r.pipeline(transaction=False)
    for k, s in enumerate(streams):
        for j in range(1 + k % 4):
            pipe.xadd(s, {"n": str(j)})
    pipe.execute()
    group = names["group"]
    reader = driver_reader(redis_server.url, ",".join(streams), group)
    reader.latestOffset(reader.initialOffset(), ReadMaxRows(40))
    reader.driver.prefetch.stop()
    reader.reportLatestOffset()
    behind = _by_stream(_points(otel, "eventbus.stream.entries_behind", group))
    assert len(streams) > STREAM_SERIES and list(behind) == [None]
    assert behind[None].value == sum(int(r.xinfo_groups(s)[0]["lag"]) for s in streams)
    claimed = _points(otel, "eventbus.entries.claimed", group)
    assert [p.attributes.get(STREAM) for p in claimed] == [None] and claimed[0].value == 40
    reader.stop()


def test_without_opentelemetry_nothing_is_imported_or_recorded(redis_server, names):
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if not installed
from spark_eventbus.group.telemetry import Telemetry
from tests.integration.helpers import driver_reader, produce
import redis
r = redis.Redis.from_url({redis_server.url!r})
produce(r, {names['stream']!r}, 3)
reader = driver_reader({redis_server.url!r}, {names['stream']!r}, {names['group']!r})
assert not reader.driver.telemetry.enabled
reader.latestOffset(reader.initialOffset(), None)
reader.reportLatestOffset()
reader.stop()
assert not any(m.startswith("opentelemetry.") for m in sys.modules), sorted(sys.modules)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_a_running_query_is_scraped_by_prometheus(spark, redis_server, names, tmp_path):
    """The recipe of docs/operations.md: ``metricsProvider`` returns a MeterProvider with the
    Prometheus exporter in the process Spark runs the source in; a scrape of it shows the
    claimed counter and the entries behind of a running query, as Redis counts them."""
    import urllib.request

    from tests.harness.redis_server import free_port
    from tests.integration.helpers import checkpoint, stream_df, wait_for
    from tests.integration.otel_provider import PORT_FILE

    port = free_port()
    PORT_FILE.write_text(str(port))
    r = redis_server.client()
    group = names["group"]
    produce(r, names["stream"], 30)
    q = (stream_df(spark, redis_server.url, names["stream"], group, maxEntriesPerTrigger=10,
                   metricsProvider="tests.integration.otel_provider:prometheus")
         .writeStream.format("noop").trigger(processingTime="200 milliseconds")
         .option("checkpointLocation", checkpoint(tmp_path)).start())

    def scrape(name: str) -> float | None:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        except OSError:
            return None
        for line in text.decode().splitlines():
            if line.startswith(name + "{") and f'redis_client_consumer_group="{group}"' in line \
                    and "redis_client_stream_name" in line:
                return float(line.rsplit(" ", 1)[1])
        return None
    try:
        wait_for(lambda: scrape("eventbus_entries_claimed_total") == 30, timeout=120,
                 what="30 claimed in the scrape")
        wait_for(lambda: scrape("eventbus_stream_entries_behind")
                 == int(r.xinfo_groups(names["stream"])[0]["lag"]) == 0, timeout=60,
                 what="the entries behind in the scrape as XINFO GROUPS says")
        assert (scrape("redis_client_stream_lag_seconds_count") or 0) >= 3  # a batch of 10 each
    finally:
        q.stop()
    assert q.exception() is None
