"""Spark's Python processes in the test environment import PySpark from its installed files.

Spark starts every Python process of its own (the daemon's workers, the planner workers, each
query's streaming source runner, ``spark-submit``'s Python) with ``$SPARK_HOME/python/lib/
pyspark.zip`` and py4j's source zip first on ``PYTHONPATH``; the pip package of PySpark ships
both (its ``SPARK_HOME`` is the package itself). Python keeps no bytecode for modules it imports
from a zip, so each of those processes compiles PySpark's modules from source: importing the
streaming source runner took 1.3 CPU seconds from the zip against 0.45 from site-packages, and
the suite starts hundreds of such processes (a query's runner must connect back to the JVM
within Spark's fixed 10 s, which a loaded 2-core machine under coverage sometimes missed).

``python -m tests.harness.pyspark_path`` (``make test`` and every test lane run it first) writes
a ``.pth`` into the environment's site-packages that, in a process whose environment has
``EVENTBUS_PYSPARK_FROM_SITE`` set (tests/conftest.py sets it, so every process the tests start
inherits it), takes this environment's own two zips off ``sys.path`` at start-up: the same
PySpark and py4j are then imported from site-packages, where their bytecode is cached. The code
imported is the same release; only where it is read from changes. ``make bench`` and
``make demo`` do not set the variable: they run as users' pip PySpark does, paying the zip's
cost (docs/performance.md).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

# "00": site-packages' .pth files run in name order, and one that imports a module (setuptools'
# distutils hook, coverage's) before this one would open the zips (a zip importer reads the whole
# directory of pyspark.zip's 1,485 files, and again at each importlib.invalidate_caches(), which
# Spark's workers call)
PTH = "00_eventbus_dev_pyspark_from_site.pth"
ENV = "EVENTBUS_PYSPARK_FROM_SITE"


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def zip_dir() -> Path:
    """Where the pip package of PySpark keeps the zips Spark puts on its Python processes' path."""
    return site_packages() / "pyspark" / "python" / "lib"


def pth_line() -> str:
    """The ``.pth`` line that takes this environment's zips off ``sys.path`` and out of the
    importer cache (real paths compared: a venv reached through a symlink, the lean venvs'
    symlinked PySpark)."""
    prefix = os.path.realpath(zip_dir()) + "/"
    gone = (f"[p for p in sys.path if p.endswith('.zip') and "
            f"os.path.realpath(p).startswith({prefix!r})]")
    return (f"import os, sys; os.environ.get({ENV!r}) and [(sys.path.remove(p), "
            f"sys.path_importer_cache.pop(p, None)) for p in {gone}]\n")


def write_pth(name: str, line: str, what: str) -> None:
    """Write the ``.pth`` ``name`` into this environment's site-packages (once; again when its
    text changed), saying ``what`` it does when it writes."""
    pth = site_packages() / name
    if not pth.exists() or pth.read_text() != line:
        pth.write_text(line)
        print(f"{what}: {pth}")


def install() -> int:
    """Write the ``.pth``; 0 always."""
    if (zip_dir() / "pyspark.zip").exists():  # else a PySpark without the zip: nothing to do
        write_pth(PTH, pth_line(), "Spark's Python processes import PySpark from site-packages")
    return 0


if __name__ == "__main__":
    sys.exit(install())
