"""A Spark Connect client whose server lacks spark-eventbus: prints, as JSON, the errors of a
batch read and of a foreachBatch with AckingBatchWriter (on Spark's rate source)."""

from __future__ import annotations

import argparse
import json
import tempfile

from pyspark.sql import SparkSession

from spark_eventbus import AckingBatchWriter


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("remote", "url", "stream"):
        ap.add_argument(f"--{name}", required=True)
    a = ap.parse_args()
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    out = {}
    try:
        spark.read.format("eventbus").option("url", a.url).option("stream", a.stream).load() \
            .count()
        out["read"] = None
    except Exception as exc:
        out["read"] = str(exc)
    writer = AckingBatchWriter(lambda df, _: df.count(), url=a.url, group="g")
    try:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
             .writeStream.foreachBatch(writer)
             .option("checkpointLocation", tempfile.mkdtemp()).start())
        q.awaitTermination(120)
        out["acking"] = None if q.exception() is None else str(q.exception())
        q.stop()
    except Exception as exc:
        out["acking"] = str(exc)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
