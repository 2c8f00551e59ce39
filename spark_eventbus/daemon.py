"""Spark's Python daemon with the connector's Redis layer loaded before it forks.

Spark starts one daemon per executor (``python -m pyspark.daemon pyspark.worker``) and forks a
Python worker from it for each concurrent task, again whenever a worker has been idle for a
minute (Spark's fixed idle timeout) and after a worker fails. Each forked worker imports
``pyspark.worker`` and, at its first task of the connector, redis-py (which loads its asyncio
client, and OpenTelemetry's SDK where that is installed), the Redis layer, pyarrow and the
decoder: 0.55-0.66 CPU s on a 2-core machine, 0.26-0.28 when forked from this daemon
(docs/deployment.md).

With ``spark.python.daemon.module=spark_eventbus.daemon`` the daemon imports those once and
every worker it forks starts with them. Nothing else changes: the daemon is PySpark's own
(:func:`pyspark.daemon.manager`), the worker module still comes from Spark's command line.
Nothing that starts a thread is loaded before the fork (pyarrow starts two native threads at
import, which a forked child would not have: PySpark's daemon imports the worker module after
the fork for that reason), so pyarrow and the decoder still load in each worker, after it.
``tests/unit/test_daemon.py`` checks that none of what is loaded here starts a thread.

Needs the package installed in the executors' Python: a ``--py-files`` zip reaches each worker
only after the fork (PySpark adds it to the worker's path per task), too late for the daemon.
Spark's planner processes (a data source's schema, a batch's plan, a write's commit) always
fork from ``pyspark.daemon``: Spark does not apply this setting to them.
"""

from __future__ import annotations


def preload() -> None:
    """Import what the workers would each import, and nothing that starts a thread: PySpark's
    worker module and the connector's Redis layer (with redis-py and hiredis)."""
    import pyspark.worker  # noqa: F401

    from . import redisio  # noqa: F401


def main() -> None:
    """Preload, then run PySpark's daemon as ``python -m pyspark.daemon`` would. What the
    preload made is frozen out of the collector's scans first (``gc.freeze``, as Python's
    documentation advises before a fork): the children share those pages instead of copying
    each one the collector touches, and each child's collections skip them."""
    import gc

    preload()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
