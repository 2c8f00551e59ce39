"""The JVM options of every JVM the tests start.

Their local sessions, ``spark-submit`` runs, the Spark Connect server and notebook kernels'
sessions read ``SPARK_SUBMIT_OPTS``; the standalone master and workers
``SPARK_DAEMON_JAVA_OPTS``; the standalone executors ``spark.executor.extraJavaOptions``
(tests/integration/test_standalone.py). Each lives for seconds to minutes on a 2-core machine
shared by the test workers: the quick JIT only (C1) and the serial GC cut the CPU the suite
spends by about 30 % (a reader and AckingBatchWriter subset on 3 workers: 255-260 → 179-185
CPU seconds, 131-133 → 90-94 s of wall time). What the tests check does not depend on the JIT;
``make bench`` measures with the JVM's defaults.
"""

from __future__ import annotations

import os

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def quick_jvms() -> None:
    """Every JVM started from this process from now on (unless the variables are set)."""
    for var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(var, QUICK_JVM)
