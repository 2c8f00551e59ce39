"""The ``--py-files`` zip (``eventbus pyfiles``) carries bytecode that Python's zip importer uses,
and only for the source it was compiled from, by a Python of the same version."""

from __future__ import annotations

import zipfile
import zipimport
from collections.abc import Callable
from pathlib import Path

from spark_eventbus.ops import pyfiles


def _rewritten(src: Path, out: Path, change: Callable[[str, bytes], bytes]) -> Path:
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out, "w") as b:
        for info in a.infolist():
            b.writestr(info, change(info.filename, a.read(info)))
    return out


def _code_of_errors(zip_path: Path):  # type: ignore[no-untyped-def]
    return zipimport.zipimporter(f"{zip_path}/spark_eventbus").get_code("errors")


def test_the_zip_imports_its_bytecode(tmp_path):
    out = tmp_path / "deps.zip"
    names = pyfiles.build(out)
    assert {"spark_eventbus/source.py", "spark_eventbus/source.pyc",
            "redis/client.pyc"} <= set(names)
    assert not [n for n in names if "__pycache__" in n]
    # compiled at build time (its file name is the zip's entry); from source it would be the
    # zip's path joined with the entry
    assert _code_of_errors(out).co_filename == "spark_eventbus/errors.py"


def test_a_source_that_changed_or_another_python_falls_back_to_the_source(tmp_path):
    out = tmp_path / "deps.zip"
    pyfiles.build(out, include_redis=False)
    changed = _rewritten(out, tmp_path / "changed.zip", lambda name, data: (
        data + b"\nCHANGED = True\n" if name == "spark_eventbus/errors.py" else data))
    code = _code_of_errors(changed)
    assert code.co_filename == f"{changed}/spark_eventbus/errors.py" and "CHANGED" in code.co_names
    other = _rewritten(out, tmp_path / "other.zip", lambda name, data: (
        b"\x00\x00" + data[2:] if name.endswith(".pyc") else data))  # another magic number
    assert _code_of_errors(other).co_filename == f"{other}/spark_eventbus/errors.py"
