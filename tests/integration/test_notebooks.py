"""The notebooks run as a user would run them (issue 15): each is executed in a kernel of this
virtual environment (nbclient) against the test Redis, and must finish without an error."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.integration, pytest.mark.deploy]
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _execute(name: str, url: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run the notebook (a copy: the committed one keeps its outputs); its text outputs."""
    monkeypatch.setenv("EVENTBUS_URL", url)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
            if "image/png" in o.get("data", {}):
                out.append("<image/png>")
    return out


def test_the_quickstart_notebook_runs(redis_server, monkeypatch):
    text = "\n".join(_execute("quickstart.ipynb", redis_server.url, monkeypatch))
    assert "not json" in text or "malformed JSON" in text  # the malformed entry's error


def test_the_operations_notebook_redrives_dead_letters_and_plots(redis_server, monkeypatch):
    outputs = _execute("operations.ipynb", redis_server.url, monkeypatch)
    text = "\n".join(outputs)
    assert "malformed rows moved to" in text and "is_valid rule failed" in text
    assert "<image/png>" in outputs  # lag, throughput and dead letters over time
    assert "lag 0, pending 0, dead letters 0" in text
    # the metrics section: OpenTelemetry scraped as Prometheus would, during a burst
    assert re.search(r"entries behind peaked at [1-9][\d,]*, ended at 0", text), text[-2000:]
    assert outputs.count("<image/png>") == 2
