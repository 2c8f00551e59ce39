"""The three streaming queries of the driver-kill test (``--query``: one, or several
comma-separated to run side by side in one driver). The test gives each its own driver: two
queries in one driver hit a Spark race under load ("Task serialization failed:
java.lang.IllegalStateException: Illegal size 5 of collection, expected 6"), Spark's and not the
connector's — seen with Spark's file writer (a foreachBatch's parquet write, the file sink) and
with a foreachBatch's ``toArrow`` collect beside the eventbus sink's query.

- ``consume``: many streams in packed partitions, each batch's (stream, ID, batch ID) appended
  to parquet with foreachBatch, so a replayed batch shows up as duplicates under its own batch
  ID: the reader's at-least-once bound and its exact replay are visible, not hidden by an
  exactly-once sink. The batch is written from the driver (``toArrow``, then a parquet file
  renamed into place: a file cut by the kill is never read);
- ``copy``: one stream read through another consumer group and written with the eventbus sink
  to another stream, each entry tagged with its source ID (``src``): the sink's exactly-once;
- ``positions``: the streams of ``consume`` read without a group (positions in the checkpoint)
  into Spark's parquet file sink: exactly once across the kills.
"""

from __future__ import annotations

import argparse
import os
import uuid

import pyarrow.parquet as pq
from _session import events, run, session
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "streams", "group", "out", "source", "target", "checkpoint"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--query", required=True,
                    help="consume, copy, positions, or several of them comma-separated")
    ap.add_argument("--max-entries", default="500")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args()
    spark = session()

    def write(batch: DataFrame, batch_id: int) -> None:
        table = batch.select("stream", "id").withColumn("batch", F.lit(batch_id)).toArrow()
        os.makedirs(args.out, exist_ok=True)
        name = f"batch-{batch_id}-{uuid.uuid4().hex}.parquet"
        part = os.path.join(args.out, "." + name)  # a dot file: parquet readers skip it
        pq.write_table(table, part)
        os.replace(part, os.path.join(args.out, name))

    writers = []
    for query in args.query.split(","):
        if query == "consume":
            writer = events(spark, args.url, args.streams, args.group, args.max_entries) \
                .writeStream.foreachBatch(write)
        elif query == "positions":
            writer = events(spark, args.url, args.streams, "", args.max_entries) \
                .select("stream", "id").writeStream.format("parquet") \
                .option("path", f"{args.out}-positions")
        elif query == "copy":
            copied = events(spark, args.url, args.source, args.group + "-copy", args.max_entries)
            writer = copied.select(F.map_concat("fields", F.create_map(F.lit("src"), "id"))
                                   .alias("fields")) \
                .writeStream.format("eventbus").option("url", args.url) \
                .option("stream", args.target).option("chunkSize", "100")
        else:
            raise SystemExit(f"unknown query {query!r}: consume, copy or positions")
        writers.append(writer.queryName(query)
                       .option("checkpointLocation", f"{args.checkpoint}/{query}"))
    run(spark, writers, args.available_now)


if __name__ == "__main__":
    main()
