"""A Python without some packages, for deployment tests: a virtual environment whose
site-packages reaches this environment's packages through symlinks, except the ones left out
(e.g. this package, redis-py and hiredis, as on a cluster whose workers only have PySpark)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.harness.pyspark_path import PTH, pth_line

WITHOUT_EVENTBUS = ("spark_eventbus", "pyspark_eventbus", "_editable_impl_spark_eventbus",
                    "__editable__")
WITHOUT_REDIS = ("redis", "redis-", "hiredis")


def lean_python(workdir: Path, without: tuple[str, ...]) -> Path:
    """The interpreter of a virtual environment in ``workdir`` holding every package of this
    one except those whose site-packages entry starts with one of ``without``."""
    venv = workdir / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=300)
    deps = workdir / "deps"
    deps.mkdir(exist_ok=True)
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        if entry.name.startswith(without) or entry.suffix == ".pth":
            continue
        link = deps / entry.name
        if not link.exists():
            link.symlink_to(entry)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    # a path line: the packages in deps/ import, their .pth hooks (editable installs) do not run
    (site / "deps.pth").write_text(f"{deps}\n")
    # Spark's Python processes read the same PySpark with bytecode (tests/harness/pyspark_path.py;
    # the line compares real paths, so it also takes off the zip under deps/'s symlinked PySpark)
    (site / PTH).write_text(pth_line())
    return python
