"""The JVM options of every JVM the tests start.

Their local sessions, ``spark-submit`` runs, the Spark Connect server and notebook kernels'
sessions read ``SPARK_SUBMIT_OPTS``; the standalone master and workers
``SPARK_DAEMON_JAVA_OPTS``; the standalone executors ``spark.executor.extraJavaOptions``
(tests/integration/test_standalone.py). Each lives for seconds to minutes on a 2-core machine
shared by the test workers, so each is told to start cheaply:

* the quick JIT only (C1) and the serial GC cut the CPU the suite spends by about 30 % (a
  reader and AckingBatchWriter subset on 3 workers: 255-260 → 179-185 CPU seconds, 131-133 →
  90-94 s of wall time);
* the classes a Spark driver loads come from a class-data-sharing archive (JDK 17's dynamic
  AppCDS: ``-XX:SharedArchiveFile``), made once per virtual environment by
  ``python -m tests.harness.jvm`` (``make test`` and the other test lanes run it first): a
  local session started, a query run and stopped took 13 CPU seconds and 11 s, 6 and 5 s with
  the archive.

What the tests check does not depend on either; ``make bench`` measures with the JVM's defaults.
A JVM whose class path differs from the archive's (whether the standalone cluster's JVMs and
the packaging test's symlinked venv match it was not checked) or a stale archive (pyspark or
Java reinstalled: its name is a digest of both) just loads its classes from the jars: the JVM's
notice of that is turned off, as tests read ``spark-submit``'s output.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Debian's JDK 17 maps an archive at a random address by default and then relocates every
# pointer in it (~0.7 s and ~190 MB of private copies per JVM); mapped where it was made, its
# pages are shared by every JVM.
_MAP_AS_MADE = "-XX:+UnlockDiagnosticVMOptions -XX:ArchiveRelocationMode=0"


def archive_path() -> Path | None:
    """Where this environment's archive lives: named by a digest of the Java binary Spark starts
    and of pyspark's jars (names, sizes, times), so a change to either makes a new one. None
    without a ``java`` or pyspark."""
    java_home = os.environ.get("JAVA_HOME")
    java = (str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java"))
    try:
        import pyspark
    except ImportError:
        return None
    if not java or not os.path.exists(java):
        return None
    digest = hashlib.sha256(QUICK_JVM.encode())
    real = os.path.realpath(java)
    digest.update(f"{real} {os.stat(real).st_mtime_ns}".encode())
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        digest.update(f"{jar} {st.st_size} {st.st_mtime_ns}".encode())
    return Path(sys.prefix) / "spark-class-archive" / f"{digest.hexdigest()[:16]}.jsa"


def jvm_options() -> str:
    """The options for a JVM the tests start: :data:`QUICK_JVM`, and the class archive when it
    has been made."""
    archive = archive_path()
    if archive is None or not archive.exists():
        return QUICK_JVM
    return f"{QUICK_JVM} {_MAP_AS_MADE} -XX:SharedArchiveFile={archive} {_QUIET_CDS}"


def quick_jvms() -> None:
    """Every JVM started from this process from now on (unless the variables are set)."""
    options = jvm_options()
    for var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(var, options)


# What the archive is made from: a local session that runs what the tests run most (a Python
# data source read in batch and as a stream, a Python UDF, Arrow to the driver, parquet files,
# foreachBatch), so its classes come from the archive.
_TRAINING = r'''
import sys, tempfile
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
import pyspark.sql.functions as F


class Reader(DataSourceReader):
    def read(self, partition):
        yield from ((i, str(i)) for i in range(100))


class Stream(DataSourceStreamReader):
    def initialOffset(self):
        return {"n": 0}

    def latestOffset(self):
        return {"n": 2}

    def partitions(self, start, end):
        return [InputPartition(i) for i in range(start["n"], end["n"])]

    def read(self, partition):
        yield from ((partition.value * 100 + i, "x") for i in range(100))


class Source(DataSource):
    @classmethod
    def name(cls):
        return "training"

    def schema(self):
        return "id BIGINT, v STRING"

    def reader(self, schema):
        return Reader()

    def streamReader(self, schema):
        return Stream()


spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
    .config("spark.sql.shuffle.partitions", "2").getOrCreate()
spark.dataSource.register(Source)
out = tempfile.mkdtemp()
df = spark.read.format("training").load()
df.withColumn("u", F.udf(lambda v: v + "!", "string")("v")).groupBy("v").count().toArrow()
df.write.mode("overwrite").parquet(out + "/batch")
q = (spark.readStream.format("training").load().writeStream.format("parquet")
     .option("checkpointLocation", out + "/chk").trigger(availableNow=True).start(out + "/stream"))
q.awaitTermination()
q = (spark.readStream.format("training").load().writeStream
     .foreachBatch(lambda b, i: b.count()).option("checkpointLocation", out + "/chk2")
     .trigger(availableNow=True).start())
q.awaitTermination()
spark.read.parquet(out + "/stream").count()
spark.stop()
'''


def make_archive() -> int:
    """Make this environment's archive unless it exists (~20 s, once); 0 also when this Java
    cannot make one (the tests then start their JVMs without it), 1 when Spark fails."""
    archive = archive_path()
    if archive is None:
        print("spark class archive: no java or pyspark here; tests run without it")
        return 0
    if archive.exists():
        return 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    for old in archive.parent.glob("*.jsa"):  # stale ones: pyspark or Java changed since
        old.unlink()
    fd, tmp = tempfile.mkstemp(suffix=".jsa", dir=archive.parent)
    os.close(fd)
    os.unlink(tmp)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               SPARK_SUBMIT_OPTS=f"{QUICK_JVM} -XX:ArchiveClassesAtExit={tmp} -Xlog:cds=error")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _TRAINING], env=env, capture_output=True,
                         text=True, timeout=600)
    if run.returncode != 0:
        print(f"spark class archive: the Spark session that makes it failed "
              f"(exit {run.returncode}):\n{run.stderr[-4000:]}", file=sys.stderr)
        return 1
    if not os.path.exists(tmp) or os.path.getsize(tmp) == 0:
        print("spark class archive: this Java made none (the tests start their JVMs without "
              f"it):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
        return 0
    os.replace(tmp, archive)
    print(f"spark class archive: {archive} ({archive.stat().st_size / 1e6:.0f} MB, "
          f"{time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(make_archive())
