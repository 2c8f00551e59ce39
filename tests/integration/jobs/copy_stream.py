"""A copy query as its own driver process, for tests that kill it with SIGKILL: an eventbus
stream read through a consumer group and written with the eventbus sink to another stream,
each entry tagged with its source ID (``src``) so duplicates in the target are visible."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[3]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "source", "group", "target", "checkpoint"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--max-entries", default="1000")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
             .getOrCreate())
    df = (spark.readStream.format("eventbus").option("url", args.url)
          .option("stream", args.source).option("group", args.group)
          .option("startingPosition", "earliest")
          .option("maxEntriesPerTrigger", args.max_entries).load())
    out = df.select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields"))
    writer = (out.writeStream.format("eventbus").option("url", args.url)
              .option("stream", args.target).option("chunkSize", "100")
              .option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime="200 milliseconds"))
    q = writer.start()
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")


if __name__ == "__main__":
    main()
