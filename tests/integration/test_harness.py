"""The test environment's own speed settings hold (tests/harness/): a Python process Spark starts
imports PySpark from site-packages, with its bytecode, not from pip's pyspark.zip."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

pytestmark = pytest.mark.integration


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
