"""A zip for ``spark-submit --py-files`` (``eventbus pyfiles OUT.zip``): for clusters whose
driver and executor Pythons have PySpark (and pyarrow, pandas) but not this package.

It holds ``spark_eventbus`` (with its Lua scripts), the ``pyspark_eventbus`` registration hook
and, unless ``include_redis`` is false, the pure-Python redis-py of this interpreter. hiredis
(a C extension) cannot ship in a zip: redis-py falls back to its Python parser (slower replies,
same results). Python imports the zip with ``zipimport``; the Lua scripts are read through
``importlib.resources``, which reads them from the zip.
"""

from __future__ import annotations

import importlib
import zipfile
from pathlib import Path
from types import ModuleType

# Suffixes of the files a package needs at run time (no caches, no tests, no sources of other
# languages).
_KEEP = (".py", ".lua", ".typed")


def _package_files(module: ModuleType) -> list[tuple[Path, str]]:
    """(file, name in the zip) of every run-time file of a package or top-level module."""
    origin = Path(module.__file__ or "")
    if origin.name != "__init__.py":  # a single-file module
        return [(origin, origin.name)]
    root = origin.parent
    return [(f, f"{module.__name__}/{f.relative_to(root).as_posix()}")
            for f in sorted(root.rglob("*"))
            if f.is_file() and f.suffix in _KEEP and "__pycache__" not in f.parts]


def build(out: Path, include_redis: bool = True) -> list[str]:
    """Write the zip to ``out``; returns the names it holds."""
    modules = ["spark_eventbus", "pyspark_eventbus"] + (["redis"] if include_redis else [])
    names: list[str] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in modules:
            for path, arcname in _package_files(importlib.import_module(name)):
                z.write(path, arcname)
                names.append(arcname)
    return names
