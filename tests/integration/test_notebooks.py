"""The notebooks run as a user would run them (issue 15): each is executed, cell by cell, in a
kernel of this virtual environment (nbclient) against the test Redis, and must finish without an
error.

Both run in one kernel, one after the other (issue 59: one Spark driver JVM for the two instead
of one each): before each notebook the kernel's namespace is reset (``%reset -f``), so a notebook
that used a name only the other one defines still fails; what stays is the process, with its
SparkSession, which each notebook's ``getOrCreate()`` picks up as a user's second notebook on one
kernel would."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.util import run_sync

from tests.harness.redis_server import free_port

# One worker runs both (they share the kernel); the quickstart first, as a reader would.
pytestmark = [pytest.mark.integration, pytest.mark.deploy, pytest.mark.xdist_group("notebooks")]
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="module")
def kernel(redis_server) -> Iterator[AsyncKernelManager]:  # type: ignore[no-untyped-def]
    """A python3 kernel started in notebooks/ with ``EVENTBUS_URL`` set to the test Redis and
    the operations notebook's metrics port chosen here: Spark's processes take their
    environment from the kernel when the first notebook starts Spark, so the port must be in it
    from the start (the notebook keeps a port already set)."""
    km = AsyncKernelManager(kernel_name="python3")
    env = {**os.environ, "EVENTBUS_URL": redis_server.url,
           "EVENTBUS_METRICS_PORT": str(free_port())}
    run_sync(km.start_kernel)(cwd=str(NOTEBOOKS), env=env)
    try:
        yield km
    finally:
        run_sync(km.shutdown_kernel)(now=True)


def _execute(name: str, km: AsyncKernelManager) -> list[str]:
    """Run the notebook (a copy: the committed one keeps its outputs) on ``km``'s kernel after
    a reset of its namespace; its text outputs."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    client = NotebookClient(nb, km=km, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
            if "image/png" in o.get("data", {}):
                out.append("<image/png>")
    return out


def test_the_quickstart_notebook_runs(kernel):
    text = "\n".join(_execute("quickstart.ipynb", kernel))
    assert "not json" in text or "malformed JSON" in text  # the malformed entry's error


def test_the_operations_notebook_redrives_dead_letters_and_plots(kernel):
    outputs = _execute("operations.ipynb", kernel)
    text = "\n".join(outputs)
    assert "malformed rows moved to" in text and "is_valid rule failed" in text
    assert "<image/png>" in outputs  # lag, throughput and dead letters over time
    assert "lag 0, pending 0, dead letters 0" in text
    # the metrics section: OpenTelemetry scraped as Prometheus would, during a burst
    assert re.search(r"entries behind peaked at [1-9][\d,]*, ended at 0", text), text[-2000:]
    assert outputs.count("<image/png>") == 2
