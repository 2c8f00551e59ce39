"""The soak's pipeline (one driver process, local[2]): streams → AckingBatchWriter → the
eventbus sink, exactly once through writeId + batchId. Each batch's (stream, id) pairs are also
appended to a handler log, so that the soak can count deliveries at the handler.

    python bench/soak_job.py URL STREAMS(comma) OUT CHECKPOINT HANDLER_LOG

URL ``sentinel:host:port,host:port``: through those Sentinels (master ``eventbus``), with
``waitReplicas=1`` for the reader, the AckingBatchWriter and the sink.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter


def main() -> int:
    url, streams, out, chk, handler_log = sys.argv[1:6]
    conn: dict[str, str] = {"url": url}
    if url.startswith("sentinel:"):
        conn = {"url": "redis:///0", "sentinels": url.removeprefix("sentinel:"),
                "sentinelMaster": "eventbus", "waitReplicas": "1", "waitTimeoutMs": "10000"}
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("eventbus-soak")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.format("eventbus").options(**conn).option("stream", streams)
              .option("group", "soak").option("startingPosition", "earliest")
              .option("ackMode", "manual").option("claimMinIdleMs", "20000")
              .option("maxEntriesPerTrigger", "5000").load())

    def handle(df: DataFrame, batch_id: int) -> None:
        (df.select(F.map_concat("fields", F.create_map(
            F.lit("src"), F.concat_ws("/", "stream", "id"))).alias("fields"))
         .write.format("eventbus").mode("append").options(**conn).option("stream", out)
         .option("writeId", "soak").option("batchId", batch_id).save())
        seen = df.select("stream", "id").collect()
        with open(handler_log, "a") as f:
            f.writelines(f"{r['stream']}/{r['id']}\n" for r in seen)

    writer = AckingBatchWriter(handle, url=conn["url"], group="soak",
                               sentinels=conn.get("sentinels", ""),
                               sentinel_master=conn.get("sentinelMaster"),
                               wait_replicas=int(conn.get("waitReplicas", "0")),
                               wait_timeout_ms=int(conn.get("waitTimeoutMs", "5000")))
    q = (events.writeStream.foreachBatch(writer).option("checkpointLocation", chk)
         .trigger(processingTime="500 milliseconds").start())
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
