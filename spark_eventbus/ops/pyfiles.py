"""A zip for ``spark-submit --py-files`` (``eventbus pyfiles OUT.zip``): for clusters whose
driver and executor Pythons have PySpark (and pyarrow, pandas) but not this package.

It holds ``spark_eventbus`` (with its Lua scripts), the ``pyspark_eventbus`` registration hook
and, unless ``include_redis`` is false, the pure-Python redis-py of this interpreter. hiredis
(a C extension) cannot ship in a zip: redis-py falls back to its Python parser (slower replies,
same results). Python imports the zip with ``zipimport``; the Lua scripts are read through
``importlib.resources``, which reads them from the zip.

Beside each module's source the zip holds its bytecode, compiled by the Python that builds the
zip (a checked hash-based ``.pyc`` where ``zipimport`` looks for it). Python writes no bytecode
cache for what it imports from a zip: without it every Python process of the cluster that loads
the connector (each executor's Python worker, the driver's planner processes and streaming
source runner) compiled it and redis-py from source, ~2.4 CPU seconds against ~0.8. A cluster
whose Python is another version (another magic number) or a source that no longer matches its
hash falls back to the source, as before.
"""

from __future__ import annotations

import importlib
import importlib.util
import marshal
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


def _pyc(source: bytes, arcname: str) -> bytes:
    """A checked hash-based ``.pyc`` of ``source`` (PEP 552): used only while the source beside
    it in the zip has this hash, and only by a Python of this magic number."""
    code = compile(source, arcname, "exec", dont_inherit=True)
    checked_hash_based = (0b11).to_bytes(4, "little")
    return (importlib.util.MAGIC_NUMBER + checked_hash_based
            + importlib.util.source_hash(source) + marshal.dumps(code))


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
                if arcname.endswith(".py"):  # where zipimport looks: beside the source
                    z.writestr(zipfile.ZipInfo(arcname + "c", z.getinfo(arcname).date_time),
                               _pyc(path.read_bytes(), arcname), zipfile.ZIP_DEFLATED)
                    names.append(arcname + "c")
    return names
