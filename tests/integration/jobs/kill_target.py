"""The two streaming queries of the driver-kill test, for a driver process of its own each
(``--query``): two queries in one driver hit a Spark race under load ("Task serialization
failed: Illegal size 5 of collection, expected 6" in the foreachBatch's parquet write), which
is Spark's, not the connector's, so the test kills two driver processes instead of one.

- ``consume``: many streams in packed partitions, each batch's (stream, ID, batch ID) appended
  to parquet with foreachBatch, so a replayed batch shows up as duplicates under its own batch
  ID: the reader's at-least-once bound and its exact replay are visible, not hidden by an
  exactly-once sink;
- ``copy``: one stream read through another consumer group and written with the eventbus sink
  to another stream, each entry tagged with its source ID (``src``): the sink's exactly-once;
- ``positions``: the streams of ``consume`` read without a group (positions in the checkpoint)
  into Spark's parquet file sink: exactly once across the kills.
"""

from __future__ import annotations

import argparse

from _session import events, run, session
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "streams", "group", "out", "source", "target", "checkpoint"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--query", choices=("consume", "copy", "positions"), required=True)
    ap.add_argument("--max-entries", default="500")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args()
    spark = session()

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.select("stream", "id").withColumn("batch", F.lit(batch_id)).write.mode("append") \
            .parquet(args.out)

    if args.query == "consume":
        writer = events(spark, args.url, args.streams, args.group, args.max_entries) \
            .writeStream.foreachBatch(write)
    elif args.query == "positions":
        writer = events(spark, args.url, args.streams, "", args.max_entries) \
            .select("stream", "id").writeStream.format("parquet") \
            .option("path", f"{args.out}-positions")
    else:
        copied = events(spark, args.url, args.source, args.group + "-copy", args.max_entries)
        writer = copied.select(F.map_concat("fields", F.create_map(F.lit("src"), "id"))
                               .alias("fields")) \
            .writeStream.format("eventbus").option("url", args.url) \
            .option("stream", args.target).option("chunkSize", "100")
    run(writer.option("checkpointLocation", f"{args.checkpoint}/{args.query}"),
        args.available_now)


if __name__ == "__main__":
    main()
