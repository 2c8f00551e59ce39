"""A Spark Connect client using a password and a TLS-style key path as options: prints, as JSON,
every text the client can see — progress, the explained plan, the error of an unreachable
server, the error of a wrong password — for the test to search for the secrets."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("remote", "url", "bad-url", "password", "stream", "checkpoint"):
        ap.add_argument(f"--{name}", required=True)
    a = ap.parse_args()
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    texts: dict[str, str] = {}

    def source(url: str, password: str, streaming: bool):  # type: ignore[no-untyped-def]
        r = spark.readStream if streaming else spark.read
        return (r.format("eventbus").option("url", url).option("password", password)
                .option("stream", a.stream).option("group", "g")
                .option("startingPosition", "earliest").load())

    events = source(a.url, a.password, True)
    q = (events.writeStream.format("noop").option("checkpointLocation", a.checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    texts["query_error"] = str(q.exception())
    texts["progress"] = json.dumps([json.loads(p.json) for p in q.recentProgress])
    texts["status"] = json.dumps(q.status)
    batch = source(a.url, a.password, False)
    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        batch.explain(extended=True)
    texts["plan"] = plan.getvalue()
    for name, url, password in (("unreachable", a.bad_url, a.password),
                                ("wrong_password", a.url, a.password + "-wrong")):
        try:
            source(url, password, False).count()
            texts[name] = "no error"
        except Exception as exc:
            texts[name] = str(exc)
    print(json.dumps(texts))


if __name__ == "__main__":
    main()
