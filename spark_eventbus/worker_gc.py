"""Cheap garbage collection in Spark's Python workers.

Spark's worker daemon runs a full ``gc.collect()`` after every task of a reused worker
(``pyspark/daemon.py``), and so do its planner workers after each call (the sink's
``streamWriter`` and ``commit`` run in those once per micro-batch). A full collection scans
every container object of the process: with pyspark, pyarrow and this package imported that is
~90,000 objects, tens of milliseconds of CPU after every task, in every worker — CPU the next
batch waits for on a small machine.

:func:`settle`, called when a task or a per-batch call of the connector starts, freezes what
is alive then (imported modules, mostly): those objects move to the permanent generation, which
collections skip. It does so at the first :data:`FREEZES` calls in a worker process, because
Spark's worker imports more lazily during its first tasks (pandas, ~37,000 objects more), and
never later: the daemon has just collected the previous task's garbage when the next one
starts, so what is frozen is the process's lasting state. Frozen objects are still freed by
reference counting; only reference cycles among them would outlive the process. Processes that
are not Spark's Python workers (a user's driver, a notebook, a test) are left alone.
"""

from __future__ import annotations

import gc
import sys

FREEZES = 8
_freezes_left = FREEZES


def in_spark_worker() -> bool:
    """True in a process Spark started to run Python (``python -m pyspark.daemon``,
    ``pyspark.worker``, its planner and streaming runner modules)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.startswith("pyspark.")


def settle() -> None:
    """Freeze the worker's current objects out of the garbage collector's scans (the first
    :data:`FREEZES` calls in a Spark worker process; nothing elsewhere)."""
    global _freezes_left
    if _freezes_left <= 0:
        return
    _freezes_left -= 1
    if not in_spark_worker():
        _freezes_left = 0
        return
    gc.freeze()
