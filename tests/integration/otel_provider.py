"""A ``metricsProvider`` for the tests, and the recipe of docs/operations.md: the source's
metrics exposed for a Prometheus scrape, on the port written in :data:`PORT_FILE` (the tests'
choice), by the Python process Spark runs the source in."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

PORT_FILE = Path(tempfile.gettempdir()) / "spark-eventbus-test-metrics-port"


def prometheus() -> Any:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    start_http_server(int(PORT_FILE.read_text()), addr="127.0.0.1")
    return MeterProvider(metric_readers=[PrometheusMetricReader()])
