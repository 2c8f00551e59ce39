"""A Spark Connect client (no JVM of its own): batch read, streaming read into the eventbus sink,
and AckingBatchWriter in foreachBatch, against the server named by --remote. Prints a JSON
summary; the test checks Redis."""

from __future__ import annotations

import argparse
import json
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("remote", "url", "source", "copy", "bad", "dlq"):
        ap.add_argument(f"--{name}", required=True)
    a = ap.parse_args()
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    out = {"batch_rows": spark.read.format("eventbus").option("url", a.url)
           .option("stream", a.source).load().count()}

    events = (spark.readStream.format("eventbus").option("url", a.url).option("stream", a.source)
              .option("group", "g").option("startingPosition", "earliest")
              .option("maxEntriesPerTrigger", "700").load())
    q = (events.select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields"))
         .writeStream.format("eventbus").option("url", a.url).option("stream", a.copy)
         .queryName("connect_copy")  # reaches the sink as option 'queryName'
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
    q.awaitTermination()
    out["copy_error"] = None if q.exception() is None else str(q.exception())

    bad = (spark.readStream.format("eventbus").option("url", a.url).option("stream", a.bad)
           .option("group", "g").option("startingPosition", "earliest").option("ackMode", "manual")
           .option("valueSchema", "n INT, name STRING").load())
    writer = AckingBatchWriter(lambda df, _: df.count(), url=a.url, group="g",
                               dead_letter_stream=a.dlq)
    q = (bad.writeStream.foreachBatch(writer).option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
    q.awaitTermination()
    out["acking_error"] = None if q.exception() is None else str(q.exception())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
