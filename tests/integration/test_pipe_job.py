"""The pipe job through spark-submit, end to end (issue 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.helpers import pending, produce

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_pipe_job_runs_through_spark_submit(redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 1_000,
                  payload=lambda i: "{oops" if i % 20 == 0 else json.dumps({"n": i, "amount": i}))
    bad = {ids[i] for i in range(0, 1_000, 20)} | {ids[1]}  # amount 1: fails is_valid below
    out, chk = tmp_path / "out", tmp_path / "chk"
    config = tmp_path / "pipe.toml"
    config.write_text(f"""
[source]
url = "{redis_server.url}"
stream = "{names['stream']}"
group = "{names['group']}"
startingPosition = "earliest"
valueSchema = "n BIGINT, amount DOUBLE"

[sink]
format = "parquet"
path = "{out}"
select = ["id", "value.*"]

[dead_letter]
stream = "{names['dlq']}"
is_valid = "value.amount <> 1"

[query]
checkpoint = "{chk}"
""")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    run = subprocess.run(
        [str(spark_submit), "--properties-file", "conf/spark-defaults.conf",
         "spark_eventbus/jobs/pipe.py", "--config", str(config)],
        cwd=ROOT, capture_output=True, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    summary = json.loads(run.stdout.decode().strip().splitlines()[-1])
    assert summary["rows_read"] == 1_000
    written = pq.read_table(out).column("id").to_pylist()
    assert sorted(written) == sorted(set(ids) - bad)
    assert r.xlen(names["dlq"]) == len(bad)
    assert pending(r, names["stream"], names["group"]) == 0
