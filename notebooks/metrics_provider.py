"""The operations notebook's ``metricsProvider`` (docs/operations.md): the source's OpenTelemetry
metrics on a Prometheus endpoint, ``127.0.0.1:$EVENTBUS_METRICS_PORT`` (default 9464), served by
the Python process Spark runs the source in. Spark starts that process in the notebook's folder,
so this module imports there as ``metrics_provider``."""

from __future__ import annotations

import os
from typing import Any


def prometheus() -> Any:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    start_http_server(int(os.environ.get("EVENTBUS_METRICS_PORT", "9464")), addr="127.0.0.1")
    return MeterProvider(metric_readers=[PrometheusMetricReader()])
