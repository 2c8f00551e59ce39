"""Restoring pickled connector objects on a Spark server, with a clear error when the server's
Python lacks the package.

Under Spark Connect the client pickles the function given to ``foreachBatch`` (e.g. an
:class:`~spark_eventbus.AckingBatchWriter`) and the server unpickles it. Pickled by reference,
a server without ``spark_eventbus`` would fail with a bare ``No module named 'spark_eventbus'``
deep in a pickling traceback. :func:`restore` is pickled *by value* (cloudpickle
``register_pickle_by_value``), so it runs on the server even then and says what to install
where. It must import nothing of the package at module level.
"""

from __future__ import annotations

import sys
from typing import Any


def restore(module: str, name: str, state: bytes, version: str) -> Any:
    """The object of class ``module.name`` with the pickled ``state`` (pickled apart: it holds
    objects of the package, which only unpickle once the import below succeeded); run where it
    is unpickled."""
    import importlib
    import pickle
    import sys

    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(
            f"spark-eventbus is not installed in the Python that runs this {name} on the Spark "
            f"server ({sys.executable}: {exc}). Under Spark Connect the server runs the data "
            "source and the functions given to foreachBatch: install the same version as the "
            f"client there (pip install 'spark-eventbus=={version}') and restart the "
            "server.") from None
    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(state))
    return obj


def reducer(obj: Any, version: str) -> tuple[Any, tuple[Any, ...]]:
    """``__reduce__`` of a connector object: restore it through :func:`restore`."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cls = type(obj)
    state = cloudpickle.dumps(dict(obj.__dict__))
    return restore, (cls.__module__, cls.__qualname__, state, version)
