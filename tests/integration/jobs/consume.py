"""A streaming query as its own driver process, for tests that kill it with SIGKILL.

Writes each batch's IDs to parquet with foreachBatch (append), so replayed batches show up as
duplicates: the at-least-once bound is visible, not hidden by an exactly-once sink.
"""

from __future__ import annotations

import argparse

from _session import events, run, session
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "stream", "group", "checkpoint", "out"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--max-entries", default="1000")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args()
    df = events(session(), args.url, args.stream, args.group, args.max_entries)

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.select("stream", "id").withColumn("batch", F.lit(batch_id)).write.mode("append") \
            .parquet(args.out)

    run(df.writeStream.foreachBatch(write).option("checkpointLocation", args.checkpoint),
        args.available_now)


if __name__ == "__main__":
    main()
