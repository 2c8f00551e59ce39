"""Packaging (issue 11): ``python -m build`` makes a wheel and an sdist; the wheel, installed
(not editable) into a fresh virtual environment, runs the demo end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.harness.lean_env import WITHOUT_EVENTBUS, lean_python

pytestmark = [pytest.mark.integration, pytest.mark.deploy]
ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_and_runs_the_demo(redis_server, tmp_path):
    dist = tmp_path / "dist"
    # --no-isolation: the backend pyproject.toml's [build-system] names is installed here (the
    # [test] extra), so no build environment is made and filled for each of the two artifacts
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel",
                            "--sdist", "--outdir", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(dist.glob("spark_eventbus-*.whl"))
    sdist = next(dist.glob("spark_eventbus-*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_eventbus.py" in names  # Spark's auto-registration hook
    assert "spark_eventbus/redisio/lua/claim.lua" in names
    assert "spark_eventbus/redisio/client.py" in names and "spark_eventbus/core/ids.py" in names
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("/README.md") for n in tar.getnames())

    # Dependencies from this environment (tests/harness/lean_env.py), spark_eventbus only from
    # the wheel; the venv has no pip of its own, so this environment's pip installs into it.
    python = lean_python(tmp_path / "lean", WITHOUT_EVENTBUS)
    fresh_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                      "get_paths()['purelib'])"], capture_output=True,
                                     text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True, timeout=300)
    where = subprocess.run([str(python), "-c", "import spark_eventbus, pyspark_eventbus; "
                            "print(spark_eventbus.__file__)"], capture_output=True, text=True,
                           check=True, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(fresh_site)), where

    env = {**os.environ, "EVENTBUS_URL": redis_server.url, "PYSPARK_PYTHON": str(python),
           "PYTHONPATH": ""}
    demo = subprocess.run([str(python), str(ROOT / "scripts" / "demo.py")], capture_output=True,
                          text=True, timeout=600, env=env, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "rows dead-lettered: 200" in demo.stdout and "pending:            0" in demo.stdout
