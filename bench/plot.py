"""The README's benchmark plot (``docs/bench.png``), drawn by ``make bench`` from its figures:
throughput per setting, and latency over time at each producer rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(figures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    bars: list[tuple[str, float, str]] = []
    if "base_rows_per_s" in figures:
        bars += [("plain loop\nXREADGROUP+XACK", figures["base_rows_per_s"], "#999999"),
                 ("Spark floor\n(in-memory source)", figures["floor"]["rows_per_s"], "#bbbbbb"),
                 ("reader\n100k/trigger", figures["reader"]["rows_per_s"], "#c0392b"),
                 ("reader\n500k/trigger", figures["reader_500k"]["rows_per_s"], "#e74c3c")]
    if "sink_base_rows_per_s" in figures:
        bars += [("plain pipelined\nXADD", figures["sink_base_rows_per_s"], "#999999"),
                 ("sink\nidempotent", figures["sink_idempotent"]["rows_per_s"], "#2471a3"),
                 ("sink\nnot idempotent", figures["sink_plain"]["rows_per_s"], "#5dade2")]
        if "sink_fields_map" in figures:
            bars += [("sink, 'fields'\nmap column", figures["sink_fields_map"]["rows_per_s"],
                      "#85c1e9")]
    left.bar(range(len(bars)), [b[1] / 1000 for b in bars], color=[b[2] for b in bars])
    left.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7, rotation=30,
                    ha="right")
    left.set_ylabel("thousand entries / s (end to end)")
    left.set_title("Throughput, ~200-byte entries, local[2], one Redis")
    for i, b in enumerate(bars):
        left.text(i, b[1] / 1000, f"{b[1] / 1000:.0f}k", ha="center", va="bottom", fontsize=8)

    for key, color in (("latency_5000", "#c0392b"), ("latency_20000", "#2471a3")):
        if key not in figures:
            continue
        series = figures[key]["series"]
        secs = [s[0] for s in series]
        rate = figures[key]["rate"]
        right.plot(secs, [s[1] for s in series], color=color, label=f"p50 at {rate:,}/s")
        right.plot(secs, [s[2] for s in series], color=color, linestyle="--",
                   label=f"p99 at {rate:,}/s")
    if "tick" in figures:
        right.axhline(figures["tick"]["interval_ms"], color="#777777", linestyle=":",
                      label="Spark floor: batch interval of a trivial source")
    right.axvline(5, color="#cccccc", linewidth=0.8)
    right.set_xlabel("seconds since the producer started")
    right.set_ylabel("latency, ms (source XADD -> target XADD)")
    right.set_title("eventbus -> eventbus, default trigger")
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
