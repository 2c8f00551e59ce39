"""A copy query as its own driver process, for tests that kill it with SIGKILL: an eventbus
stream read through a consumer group and written with the eventbus sink to another stream,
each entry tagged with its source ID (``src``) so duplicates in the target are visible."""

from __future__ import annotations

import argparse

from _session import events, run, session
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "source", "group", "target", "checkpoint"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--max-entries", default="1000")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args()
    df = events(session(), args.url, args.source, args.group, args.max_entries)
    out = df.select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields"))
    run(out.writeStream.format("eventbus").option("url", args.url)
        .option("stream", args.target).option("chunkSize", "100")
        .option("checkpointLocation", args.checkpoint), args.available_now)


if __name__ == "__main__":
    main()
