"""Orders from Redis into the pipeline, and what leaves it for Redis.

``spark`` is the pipeline's session (the CLI puts it in scope). The Redis URL and the stream
come from the environment, so that one project serves every environment.
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

URL = os.environ.get("EVENTBUS_URL", "redis://localhost:6379/0")
STREAM = os.environ.get("EVENTBUS_STREAM", "orders")
SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE"


@dp.table(comment="Every order entry, as read through the consumer group 'pipeline'")
def orders_raw() -> DataFrame:
    # ackMode=commit (the default): an entry is acked once this flow has committed the batch
    # that holds it, i.e. once it is in this table. A restart replays what was not committed.
    return (spark.readStream.format("eventbus")  # noqa: F821 (the pipeline's session)
            .option("url", URL).option("stream", STREAM)
            .option("group", "pipeline").option("startingPosition", "earliest")
            .option("valueSchema", SCHEMA)
            .load())


@dp.table(comment="Every order entry again, read without a consumer group")
def orders_audit() -> DataFrame:
    # Without option group nothing is written to Redis (a read-only ACL user is enough): each
    # stream's position lives in this flow's checkpoint, and every entry arrives exactly once.
    return (spark.readStream.format("eventbus")  # noqa: F821
            .option("url", URL).option("stream", STREAM)
            .option("startingPosition", "earliest")
            .load()
            .select("stream", "id", "timestamp"))


@dp.table(comment="Orders that parsed")
def orders() -> DataFrame:
    return (spark.readStream.table("orders_raw")  # noqa: F821
            .where("error IS NULL")
            .select("stream", "id", "timestamp", "value.*"))


# Malformed orders go back to Redis, to a dead-letter stream, with their reason: Declarative
# Pipelines has no foreachBatch, so the sink does it (idempotent per batch: exactly once).
dp.create_sink("orders_dead_letters", format="eventbus",
               options={"url": URL, "stream": f"{STREAM}:dlq"})


@dp.append_flow(target="orders_dead_letters")
def dead_letters() -> DataFrame:
    return (spark.readStream.table("orders_raw")  # noqa: F821
            .where("error IS NOT NULL")
            .select(F.map_concat("fields", F.create_map(
                F.lit("dlq.reason"), "error", F.lit("dlq.source.stream"), "stream",
                F.lit("dlq.source.id"), "id")).alias("fields")))


# The clean orders, copied to another stream for the services downstream.
dp.create_sink("orders_clean_stream", format="eventbus",
               options={"url": URL, "stream": f"{STREAM}:clean"})


@dp.append_flow(target="orders_clean_stream")
def copy_clean() -> DataFrame:
    return (spark.readStream.table("orders")  # noqa: F821
            .select(F.to_json(F.struct("order_id", "customer", "amount")).alias("payload"),
                    F.col("id").alias("source_id")))


@dp.materialized_view(comment="Orders and revenue per minute, recomputed each run")
def orders_per_minute() -> DataFrame:
    return (spark.read.table("orders")  # noqa: F821
            .groupBy(F.window("timestamp", "1 minute").start.alias("minute"))
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue")))
