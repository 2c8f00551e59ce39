"""A ``metricsProvider`` for the tests, and the recipe of docs/operations.md: the source's
metrics exposed for a Prometheus scrape, on the port written in :data:`PORT_FILE` (the tests'
choice), by the Python process Spark runs the source in."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

# one file per pytest-xdist worker (Spark's Python workers inherit the variable)
PORT_FILE = Path(tempfile.gettempdir()) / (
    f"spark-eventbus-test-metrics-port-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")


def prometheus() -> Any:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    start_http_server(int(PORT_FILE.read_text()), addr="127.0.0.1")
    return MeterProvider(metric_readers=[PrometheusMetricReader()])
