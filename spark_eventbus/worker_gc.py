"""Cheap garbage collection in Spark's Python workers.

Spark's worker daemon runs a full ``gc.collect()`` after every task of a reused worker
(``pyspark/daemon.py``), and so do its planner workers after each call (the sink's
``streamWriter`` and ``commit`` run in those once per micro-batch). A full collection scans
every container object of the process: with pyspark, pyarrow and this package imported that is
~90,000 objects, tens of milliseconds of CPU after every task, in every worker — CPU the next
batch waits for on a small machine.

:func:`settle` freezes, once per worker process, what is alive when the connector first runs
there (imported modules, mostly): those objects move to the permanent generation, which
collections skip. Objects are still freed by reference counting; only reference cycles among
the frozen objects would outlive the process, and modules do not die before it does.
Processes that are not Spark's Python workers (a user's driver, a notebook, a test) are left
alone.
"""

from __future__ import annotations

import gc
import sys

_settled = False


def in_spark_worker() -> bool:
    """True in a process Spark started to run Python (``python -m pyspark.daemon``,
    ``pyspark.worker``, its planner and streaming runner modules)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.startswith("pyspark.")


def settle() -> None:
    """Freeze the worker's current objects out of the garbage collector's scans (once)."""
    global _settled
    if _settled:
        return
    _settled = True
    if in_spark_worker():
        gc.freeze()
