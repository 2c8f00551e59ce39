"""The pipe job: Redis streams → (JSON parsing) → parquet / JSON / console / another Redis
stream, with dead letters.

Runs from a checkout as::

    spark-submit --properties-file conf/spark-defaults.conf spark_eventbus/jobs/pipe.py \\
        --config conf/pipe.example.toml

or, with the package installed, ``python -m spark_eventbus.jobs.pipe --config <toml>``. Every
setting comes from the TOML file (see ``conf/pipe.example.toml``); rows that do not parse or
fail ``is_valid`` go to the dead-letter stream through :class:`AckingBatchWriter`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SINK_FORMATS = ("parquet", "json", "console", "eventbus")


class PipeConfigError(ValueError):
    """The TOML file is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class PipeConfig:
    source: dict[str, str]
    sink_format: str
    sink_path: str | None
    sink_options: dict[str, str] = field(default_factory=dict)
    dead_letter_stream: str | None = None
    is_valid: str | None = None
    checkpoint: str = ""
    trigger: str = "availableNow"
    select: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return self.source.get("url", "redis://localhost:6379/0")


def _table(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise PipeConfigError(f"[{name}] must be a table")
    return value


# Where the source's Redis is: the eventbus sink writes there unless [sink.options] says.
_SHARED_CONNECTION = {"url", "password", "sentinels", "sentinelmaster", "sentinelusername",
                      "sentinelpassword", "failovertimeoutms"}


def _check_options(source: Mapping[str, str], fmt: str, sink_options: Mapping[str, str]
                   ) -> None:
    """The reader's and the eventbus sink's own validation, before Spark starts."""
    from spark_eventbus.errors import ConfigError
    from spark_eventbus.options.reader import parse_reader_options
    from spark_eventbus.options.writer import parse_sink_options

    try:
        parse_reader_options(source, streaming=True, warn=False)
    except ConfigError as exc:
        raise PipeConfigError(f"[source] {exc}") from None
    if fmt == "eventbus":
        try:  # writeId and batchId: the pipe sets them per batch
            parse_sink_options({**sink_options, "writeId": "pipe", "batchId": "0"},
                               warn=False)
        except ConfigError as exc:
            raise PipeConfigError(f"[sink.options] {exc}") from None


def load_config(path: str | Path) -> PipeConfig:
    """Read and validate the job's TOML file."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PipeConfigError(f"config file {str(path)!r} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise PipeConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    source = {k: str(v) for k, v in _table(doc, "source").items()}
    if "stream" not in source or "group" not in source:
        raise PipeConfigError("[source] needs 'stream' and 'group' (the reader's options)")
    if source.get("ackMode", source.get("ackmode", "manual")) != "manual":
        raise PipeConfigError("[source] ackMode must stay 'manual': the pipe acks through "
                              "AckingBatchWriter after each batch is written")
    source["ackMode"] = "manual"
    sink = _table(doc, "sink")
    fmt = str(sink.get("format", "parquet")).lower()
    if fmt not in SINK_FORMATS:
        raise PipeConfigError(f"[sink] format {fmt!r} is not supported: use one of "
                              f"{', '.join(SINK_FORMATS)}")
    out_path = sink.get("path")
    sink_options = {k: str(v) for k, v in _table(sink, "options").items()}
    if fmt == "eventbus":
        if out_path:
            raise PipeConfigError("[sink] format 'eventbus' takes no 'path': name the target "
                                  "in [sink.options] stream")
        # The target Redis defaults to the source's (a Sentinel-managed one too): all of its
        # connection settings, or none when [sink.options] names its own Redis.
        given = {k.lower() for k in sink_options}
        if not given & {"url", "sentinels"}:
            for key, value in source.items():
                if key.lower() in _SHARED_CONNECTION and key.lower() not in given:
                    sink_options[key] = value
    elif fmt != "console" and not out_path:
        raise PipeConfigError(f"[sink] format {fmt!r} needs 'path'")
    _check_options(source, fmt, sink_options)
    query = _table(doc, "query")
    checkpoint = query.get("checkpoint")
    if not checkpoint:
        raise PipeConfigError("[query] needs 'checkpoint': where Spark keeps the query's "
                              "progress (a directory)")
    dlq = _table(doc, "dead_letter")
    select = sink.get("select", ["fields"] if fmt == "eventbus" else [])
    if not isinstance(select, list):
        raise PipeConfigError("[sink] select must be a list of SQL expressions")
    return PipeConfig(
        source=source, sink_format=fmt, sink_path=str(out_path) if out_path else None,
        sink_options=sink_options,
        dead_letter_stream=dlq.get("stream"), is_valid=dlq.get("is_valid"),
        checkpoint=str(checkpoint), trigger=str(query.get("trigger", "availableNow")),
        select=tuple(str(s) for s in select),
    )


def build_query(spark: Any, cfg: PipeConfig) -> Any:
    """Start the streaming query described by ``cfg``; returns the StreamingQuery."""
    from spark_eventbus import AckingBatchWriter

    reader = spark.readStream.format("eventbus")
    for key, value in cfg.source.items():
        reader = reader.option(key, value)
    events = reader.load()

    write_id = "pipe-" + hashlib.sha256(cfg.checkpoint.encode()).hexdigest()[:16]

    def write(batch: Any, batch_id: int) -> None:
        out = batch.selectExpr(*cfg.select) if cfg.select else batch
        if cfg.sink_format == "console":
            out.show(20, truncate=False)
            return
        if cfg.sink_format == "eventbus":
            # writeId: with the query's id and batch id (from Spark) it makes a replayed batch
            # write nothing twice, so the pipe is exactly-once into Redis.
            # batchId and a writeId of this checkpoint: also under Spark Connect, whose
            # foreachBatch writes do not see the streaming ids (classic Spark pairs them too).
            out.write.format("eventbus").mode("append").options(**cfg.sink_options) \
                .option("writeId", write_id).option("batchId", batch_id).save()
            return
        out.write.format(cfg.sink_format).mode("append").options(**cfg.sink_options) \
            .save(cfg.sink_path)

    # The source's connection settings and group; malformed rows go to the [dlq] section's
    # stream (the source's deadLetterStream is for entries delivered too often).
    writer = AckingBatchWriter(
        write, {k: v for k, v in cfg.source.items() if k.lower() != "deadletterstream"},
        dead_letter_stream=cfg.dead_letter_stream, is_valid=cfg.is_valid)
    stream = events.writeStream.foreachBatch(writer).option("checkpointLocation",
                                                            cfg.checkpoint)
    if cfg.trigger == "availableNow":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=cfg.trigger)
    return stream.start()


_CONNECTOR_ERROR = re.compile(r"spark_eventbus\.errors\.\w+: ([^\n]+)")


def one_line(exc: BaseException) -> str:
    """The connector's message inside a (Spark-wrapped) failure, else its first line."""
    text = str(exc)
    found = _CONNECTOR_ERROR.search(text)
    if found:
        return found.group(1).strip()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:500]


def _quiet(spark: Any) -> None:
    """Without --verbose: no Spark log on stderr once the session runs (a failed query would
    print ~200 lines of stack traces); the failure is one line instead."""
    with contextlib.suppress(Exception):  # Spark Connect: no sparkContext; the server logs
        jvm = spark.sparkContext._jvm
        # every logger, also those a log4j2.properties sets apart (setLogLevel: the root only)
        jvm.org.apache.logging.log4j.core.config.Configurator.setAllLevels(
            "", jvm.org.apache.logging.log4j.Level.OFF)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pipe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the job's TOML file")
    ap.add_argument("--verbose", action="store_true",
                    help="keep Spark's log and print the full traceback when the query fails")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except PipeConfigError as exc:
        print(f"pipe: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_eventbus import register

    spark = SparkSession.builder.appName("eventbus-pipe").getOrCreate()
    if not args.verbose:
        _quiet(spark)
    # Spark finds format("eventbus") through the installed pyspark_eventbus module; a package
    # shipped with --py-files is on sys.path but not seen by that lookup, so register it here.
    register(spark)
    failure: BaseException | None
    try:
        query = build_query(spark, cfg)
        query.awaitTermination()
        failure = query.exception()
    except Exception as exc:
        failure = exc
    if failure is not None:
        hint = "" if args.verbose else " (run with --verbose for Spark's log and the traceback)"
        print(f"pipe: the query failed: {one_line(failure)}{hint}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(failure)
        return 1
    rows = sum(p.numInputRows for p in query.recentProgress)  # p["..."] is None on Connect
    print(json.dumps({"rows_read": rows, "batches": len(query.recentProgress),
                      "output": cfg.sink_path or cfg.sink_options.get("stream")
                      or cfg.sink_format}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
