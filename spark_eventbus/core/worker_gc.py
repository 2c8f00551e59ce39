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

:func:`paused_gc`, in Spark's Python workers too: the cyclic collector held off while a Redis
reply is turned into Python objects (:func:`.redisio.wire.read_replies`). A page of 5,000 stream
entries is ~10,000 new lists that live until the page is decoded; the collector's generation-0
threshold (700 new containers) sets off 14 collections per page without the pause and 1 with
it, each finding no garbage (replies hold no reference cycles). What they cost grows with
whatever else young the process holds (docs/performance.md: an executor's replay 1.08x [0.99 to
1.11], within the spread; with 100,000 parsed entries alive besides, a page's parse 1.9 -> 0.9
us per entry). Objects are still freed by reference counting.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator

FREEZES = 8
_freezes_left = FREEZES


# The connector's stand-in for ``pyspark.daemon`` (``spark.python.daemon.module``): the package
# root's ``daemon.py``, named here as text (this room imports nothing of the package).
DAEMON_MODULE = "spark_eventbus.daemon"


def in_spark_worker() -> bool:
    """True in a process Spark started to run Python (``python -m pyspark.daemon`` or
    :data:`DAEMON_MODULE` and the workers they fork, its planner and streaming runner
    modules)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and (spec.name.startswith("pyspark.") or spec.name == DAEMON_MODULE)


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


_pause_lock = threading.Lock()
_in_worker = in_spark_worker()  # __main__ is set before the connector is imported
_pausing = 0  # threads inside paused_gc()
_resume = False  # whether the collector was on when the first of them came in


def _after_fork_in_child() -> None:
    """A child forked while a thread of its parent was inside :func:`paused_gc` has no such
    thread: the count starts again, the lock is new, and the collector is on if it was."""
    global _pause_lock, _pausing
    _pause_lock = threading.Lock()
    if _pausing and _resume:
        gc.enable()
    _pausing = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the ``with`` block (a reply being parsed), then as
    it was — in Spark's Python workers only (:func:`in_spark_worker`, where the connector owns
    the process: the executors' tasks, the streaming source runner); a user's process (a
    driver calling ``AckingBatchWriter``, the CLI, a notebook) keeps its collector as it set
    it. Thread-safe: the source runner parses on several threads, and the collector is turned
    back on when the last of them leaves, if it was on when the first came in. Never held
    across a ``yield`` to Spark: a block ends before its caller's generator hands a batch on."""
    global _pausing, _resume
    if not _in_worker:
        yield
        return
    with _pause_lock:
        if _pausing == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausing -= 1
            if _pausing == 0 and _resume:
                gc.enable()
