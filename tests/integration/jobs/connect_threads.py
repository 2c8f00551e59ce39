"""A Spark Connect client writing from other Python threads, with no register() call anywhere:
4 threads each ``df.write.format("eventbus")`` one stream, and one thread starts an eventbus →
eventbus streaming query. Then register() from a thread (it must not reach for a JVM the client
does not have). Prints, as JSON, each thread's error (None when it worked)."""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_eventbus import register


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("remote", "url", "source", "prefix"):
        ap.add_argument(f"--{name}", required=True)
    a = ap.parse_args()
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    targets = [f"{a.prefix}:{i}" for i in range(4)]
    # built on this thread, written from the others
    frames = {t: spark.range(500).select(F.col("id").cast("string").alias("n"),
                                         F.lit(t).alias("target")) for t in targets}

    def write(target: str) -> str | None:
        try:
            frames[target].write.format("eventbus").option("url", a.url) \
                .option("stream", target).mode("append").save()
            return None
        except Exception as exc:
            return str(exc)

    def stream() -> str | None:
        try:
            q = (spark.readStream.format("eventbus").option("url", a.url)
                 .option("stream", a.source).option("group", "g")
                 .option("startingPosition", "earliest").load()
                 .select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields"))
                 .writeStream.format("eventbus").option("url", a.url)
                 .option("stream", a.source + ":copy")
                 .option("checkpointLocation", tempfile.mkdtemp())
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            return None if q.exception() is None else str(q.exception())
        except Exception as exc:
            return str(exc)

    with ThreadPoolExecutor(4) as pool:
        # the writes at once, then the stream from another new thread: five Python workers
        # starting together on the server could miss Spark's 10 s connect-back on a busy machine
        out: dict[str, object] = {"writes": list(pool.map(write, targets))}
        out["stream"] = pool.submit(stream).result()
        out["register"] = pool.submit(lambda: register(spark)).result()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
