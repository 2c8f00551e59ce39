"""The test environment's own speed settings hold (tests/harness/): a Python process Spark starts
imports PySpark from site-packages, with its bytecode, not from pip's pyspark.zip; under
``COVERAGE=1`` coverage starts only in processes that import the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import coverage
import pytest
from pyspark.sql import functions as F

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_spark_python_workers_import_pyspark_with_its_bytecode(spark):
    @F.udf("string")
    def where(_):  # type: ignore[no-untyped-def]  # (hints would make it an Arrow UDF)
        import py4j
        import pyspark

        return f"{pyspark.__file__} {py4j.__file__}"

    [row] = spark.range(1).select(where("id").alias("where")).collect()
    assert ".zip" not in row.where, (
        f"a Python worker of Spark imports from a zip ({row.where}): every such process compiles "
        "PySpark from source; run `make bytecode` (tests/harness/pyspark_path.py)")


@pytest.mark.parametrize("imports_the_package", [True, False], ids=["imports", "does-not"])
def test_lane_coverage_starts_at_the_first_import_of_the_package(tmp_path, imports_the_package):
    """Under ``COVERAGE=1`` a process is traced from its first import of ``spark_eventbus`` on
    (tests/harness/lane_coverage.py), and one that never imports it (Spark's daemons, a streaming
    source runner before it connects back) runs without coverage."""
    first = ("spark_eventbus.redisio.wire" if imports_the_package
             else "pyspark.sql.streaming.python_streaming_source_runner")
    # what the process's children would inherit: not coverage's own variable
    code = (f"import os, sys, {first}; "
            "print('coverage' in sys.modules, 'COVERAGE_PROCESS_START' in os.environ)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env.update(EVENTBUS_COVERAGE_START=str(ROOT / ".coveragerc"),
               COVERAGE_FILE=str(tmp_path / "data"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    data = list(tmp_path.glob("data.*"))
    if not imports_the_package:
        assert out == ["False", "False"] and data == [], (out, data)
        return
    assert out == ["True", "False"] and len(data) == 1, (
        f"no coverage after importing the package ({out}, {data}): run `make bytecode`, which "
        "writes the .pth of tests/harness/lane_coverage.py")
    cov = coverage.CoverageData(str(data[0]))
    cov.read()
    assert any(f.endswith("redisio/wire.py") and cov.lines(f) for f in cov.measured_files())
