"""The modes an option applies to, the option names that are not the connector's own (Spark's,
and ``redis.*``: redis-py's settings), and the limits the table and the writers share."""

from __future__ import annotations

BATCH, STREAMING, SINK, ACKING = "batch", "streaming", "sink", "acking"
READS = frozenset({BATCH, STREAMING})
ALL = frozenset({BATCH, STREAMING, SINK, ACKING})
MODE_TEXT = {BATCH: "batch reads", STREAMING: "streaming reads", SINK: "writes",
              ACKING: "AckingBatchWriter"}

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
# Rows per sink chunk (one transaction); the cap keeps one EXEC well under 50 ms of Redis time.
MAX_CHUNK_SIZE = 10_000
# The options Spark itself puts into a data source's options, read off Spark 4.3's own code
# (the classes' bytecode in pyspark/jars; the Scala source names the same calls), and checked on
# the installed Spark by tests/integration/test_spark_options.py.
# They are Spark's, not the user's: accepted silently in every mode, never validated here.
#  * path: DataFrameReader.load(path), DataStreamReader.load(path), DataFrameWriter.save(path),
#    DataStreamWriter.start(path) (classic: extraOptions + ("path" -> path)); Spark Connect's
#    SparkConnectPlanner does the same for a client's load/save/start with a path.
#  * paths: DataSourceV2Utils.getOptionsWithPaths, for load(path1, path2, ...).
#  * checkpointLocation: DataStreamWriter.option("checkpointLocation", ...) — set by users and
#    by Declarative Pipelines for every flow (pipelines.graph.SinkWrite.startStream,
#    StreamingTableWrite.startStream: the pipeline's own checkpoint storage).
#  * queryName: DataStreamWriter.queryName(name) is extraOptions + ("queryName" -> name), so it
#    reaches the sink's options whenever a query is named — by a user, by a Spark Connect
#    client (SparkConnectPlanner calls queryName), and by Declarative Pipelines, which names
#    every flow's query (SinkWrite.startStream: writeStream.queryName(displayName)).
#  * __v1_save_as_table_overwrite: DataFrameWriter.saveAsTable(...) with mode overwrite.
# Lower case, as option keys are compared (Spark's options are case-insensitive).
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname",
                           "__v1_save_as_table_overwrite"})
# Options with this prefix are redis-py's own settings (option_values.CLIENT_SETTINGS).
CLIENT_PREFIX = "redis."
