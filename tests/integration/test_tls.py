"""TLS (issue 12): reader, sink, AckingBatchWriter, CLI and pipe job over ``rediss://`` with a
private CA, mutual TLS, and the errors of a client that does not trust the server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from redis.cluster import RedisCluster

from spark_eventbus import AckingBatchWriter, ConfigError
from spark_eventbus.core.keys import key_slot
from tests.integration.helpers import checkpoint, pending, produce, stream_df

pytestmark = [pytest.mark.integration, pytest.mark.server, pytest.mark.xdist_group("tls")]


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    return f"tls{tag}:orders", f"tls{tag}:dlq"


def test_reader_sink_and_acking_writer_over_tls_with_a_private_ca(spark, tls_redis, tls_files,
                                                                   tmp_path):
    r = tls_redis.client()
    stream, dlq = _names()
    ids = produce(r, stream, 2_000, payload=lambda i: "{bad" if i % 50 == 0
                  else json.dumps({"n": i, "name": "x"}))
    ca = str(tls_files.ca)
    seen: list[str] = []

    def handle(df, batch_id):  # type: ignore[no-untyped-def]
        seen.extend(row["id"] for row in df.select("id").collect())
        # the sink over TLS too, with the CA given in the URL instead of an option
        df.select("fields").write.format("eventbus") \
            .option("url", f"{tls_redis.url}?ssl_ca_certs={ca}") \
            .option("stream", stream + ":copy").option("writeId", "copy").mode("append").save()

    writer = AckingBatchWriter(handle, url=tls_redis.url, tls_ca_cert=ca, group="g",
                               dead_letter_stream=dlq)
    df = stream_df(spark, tls_redis.url, stream, "g", tlsCaCert=ca, ackMode="manual",
                   valueSchema="n INT, name STRING", maxEntriesPerTrigger=800)
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", checkpoint(tmp_path))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    bad = {ids[i] for i in range(0, 2_000, 50)}
    assert Counter(seen) == Counter(set(ids) - bad)
    assert r.xlen(stream + ":copy") == 2_000 - len(bad)
    assert {f[b"dlq.source.id"].decode() for _, f in r.xrange(dlq)} == bad
    assert pending(r, stream, "g") == 0


def test_mutual_tls_needs_the_client_certificate(spark, mtls_redis, tls_files):
    r = mtls_redis.client()
    stream, _ = _names()
    produce(r, stream, 100)
    ca, cert, key = str(tls_files.ca), str(tls_files.client_cert), str(tls_files.client_key)
    rows = (spark.read.format("eventbus").option("url", mtls_redis.url).option("stream", stream)
            .option("tlsCaCert", ca).option("tlsCertFile", cert).option("tlsSecretKeyFile", key)
            .load().collect())
    assert len(rows) == 100
    with pytest.raises(Exception, match="tlsCertFile") as err:
        spark.read.format("eventbus").option("url", mtls_redis.url).option("stream", stream) \
            .option("tlsCaCert", ca).load().collect()
    assert key not in str(err.value)


def test_a_client_that_does_not_trust_the_server_fails_at_start_saying_why(spark, tls_redis,
                                                                             tmp_path):
    stream, _ = _names()
    produce(tls_redis.client(), stream, 10)
    q = (stream_df(spark, tls_redis.url, stream, "g").writeStream.format("noop")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(120)
    text = str(err.value)
    assert "TLS handshake" in text and "not trusted" in text and "'tlsCaCert'" in text
    assert "initialOffset" in text  # at query start, before any task
    assert q.lastProgress is None


def test_tls_options_are_checked_before_anything_connects(tls_files):
    from spark_eventbus.options.reader import parse_reader_options

    with pytest.raises(ConfigError, match="needs TLS: use a rediss:// URL"):
        parse_reader_options({"url": "redis://h:1/0", "stream": "s",
                              "tlsCaCert": str(tls_files.ca)}, streaming=False)
    with pytest.raises(ConfigError, match="go together"):
        parse_reader_options({"url": "rediss://h:1/0", "stream": "s",
                              "tlsCertFile": str(tls_files.client_cert)}, streaming=False)
    with pytest.raises(ConfigError, match="no such file") as err:
        parse_reader_options({"url": "rediss://h:1/0", "stream": "s",
                              "tlsCertFile": str(tls_files.client_cert),
                              "tlsSecretKeyFile": "/secret/place/key.pem"}, streaming=False)
    assert "/secret/place" not in str(err.value)


def test_cli_over_mutual_tls(mtls_redis, tls_files):
    stream, _ = _names()
    produce(mtls_redis.client(), stream, 5)
    base = [sys.executable, "-m", "spark_eventbus", "--url", mtls_redis.url, "--tls-ca-cert",
            str(tls_files.ca)]
    ok = subprocess.run([*base, "--tls-cert-file", str(tls_files.client_cert), "--tls-key-file",
                         str(tls_files.client_key), "status", "--stream", stream, "--json"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["length"] == 5
    refused = subprocess.run([*base, "status", "--stream", stream], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 1 and "TLS handshake" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr


def test_secrets_stay_out_of_plans_progress_checkpoints_and_errors(spark, mtls_redis,
                                                                    tls_files, tmp_path):
    r = mtls_redis.client()
    stream, _ = _names()
    produce(r, stream, 300)
    user, password = f"u{uuid.uuid4().hex[:6]}", "pw-" + uuid.uuid4().hex
    r.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    key = str(tls_files.client_key)
    url = mtls_redis.url.replace("rediss://", f"rediss://{user}@")
    tls = {"tlsCaCert": str(tls_files.ca), "tlsCertFile": str(tls_files.client_cert),
           "tlsSecretKeyFile": key, "password": password}
    df = stream_df(spark, url, stream, "g", maxEntriesPerTrigger=100, **tls)
    chk = tmp_path / "chk"
    q = (df.writeStream.format("noop").option("checkpointLocation", str(chk))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300) and q.exception() is None
    texts = {"plan": df._jdf.queryExecution().toString(),
             "progress": " ".join(str(p) for p in q.recentProgress)}
    texts.update({str(f): f.read_text(errors="replace") for f in chk.rglob("*") if f.is_file()})
    assert len(q.recentProgress) >= 3 and any("offsets" in name for name in texts)
    bad_port = url.rsplit(":", 1)[0] + ":1/0"
    with pytest.raises(Exception) as err:
        spark.read.format("eventbus").options(**tls).option("url", bad_port) \
            .option("stream", stream).load().collect()
    texts["error"] = str(err.value)
    for where, text in texts.items():
        assert password not in text and key not in text, where


def test_a_redis_cluster_over_tls(spark, tls_cluster, tls_files, tmp_path, names):
    """rediss:// to one node of a TLS cluster: the client follows the topology over TLS (the
    nodes announce their TLS ports); a read of streams on every shard into the sink, and the
    CLI."""
    r = RedisCluster.from_url(tls_cluster.url, ssl_ca_certs=str(tls_files.ca))
    tag = names["tag"]
    streams = [f"tlsc{tag}:{i}" for i in range(6)]
    shards = {tls_cluster.node_of_slot(key_slot(s)).port for s in streams}
    assert len(shards) >= 2, "the streams should span shards"
    ids = {s: produce(r, s, 300) for s in streams}
    ca = str(tls_files.ca)
    df = stream_df(spark, tls_cluster.url, ",".join(streams), "g", tlsCaCert=ca,
                   maxEntriesPerTrigger=700)
    target = f"{{tlsc{tag}}}:copy"
    q = (df.select(F.map_concat("fields", F.create_map(F.lit("src"), F.concat_ws(
        "/", "stream", "id"))).alias("fields"))
         .writeStream.format("eventbus").option("url", tls_cluster.url)
         .option("tlsCaCert", ca).option("stream", target)
         .option("checkpointLocation", checkpoint(tmp_path)).trigger(availableNow=True).start())
    assert q.awaitTermination(300) and q.exception() is None
    copied = Counter(f[b"src"].decode() for _, f in r.xrange(target))
    assert copied == Counter(f"{s}/{i}" for s in streams for i in ids[s])
    assert all(pending(r, s, "g") == 0 for s in streams)
    status = subprocess.run([sys.executable, "-m", "spark_eventbus", "--url", tls_cluster.url,
                             "--tls-ca-cert", ca, "status", "--stream", streams[-1], "--json"],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["length"] == 300
