"""Coverage in a test lane starts in a process when it first imports this package.

``make test COVERAGE=1`` (and the server lanes) measure what each lane executes of
``spark_eventbus/redisio/`` in every Python process the lane starts, for ``make check-lanes``.
Coverage's own start-up hook (``COVERAGE_PROCESS_START``) starts it at the start of every Python
process: Spark's daemons and the workers they fork, planner workers and each query's streaming
source runner, most of which never import this package. A streaming source runner then spent
~1.1 CPU seconds instead of ~0.7 before connecting back to the JVM, which Spark gives a fixed
10 s (``PythonWorkerFactory.createSimpleWorker``, no setting): on 2 cores with three pytest
workers' Spark the test lane missed it twice (2026-11-28 20:24, 23:38).

``python -m tests.harness.lane_coverage`` (``make bytecode``, run first by every test lane)
writes a ``.pth`` into the environment's site-packages. In a process whose environment has
``EVENTBUS_COVERAGE_START`` (the lanes set it to ``.coveragerc`` with ``COVERAGE=1``) it puts a
finder first on ``sys.meta_path`` that, when ``spark_eventbus`` is first imported, starts
coverage with that configuration and steps aside. A runner imports the package when it
unpickles the data source, after it has connected back; a process that never imports it runs
untraced. ``COVERAGE_PROCESS_START`` is set only for the call that starts coverage, so the
processes this one starts decide for themselves the same way. Without the variable the line
does nothing.
"""

from __future__ import annotations

import sys

from tests.harness.pyspark_path import write_pth

PTH = "01_eventbus_dev_lane_coverage.pth"
ENV = "EVENTBUS_COVERAGE_START"

# Run by the .pth line (one line: exec of this text) in a process with ENV set. No imports at
# start-up: the finder is a plain object (sys.meta_path takes anything with find_spec).
HOOK = '''
class _EventbusLaneCoverage:
    """Starts coverage (the lane's .coveragerc) at this process's first import of spark_eventbus."""

    def find_spec(self, name, path=None, target=None):
        if name != "spark_eventbus" and not name.startswith("spark_eventbus."):
            return None
        import os
        import sys
        sys.meta_path.remove(self)
        rc = os.environ.get("EVENTBUS_COVERAGE_START")
        if rc:
            os.environ["COVERAGE_PROCESS_START"] = rc
            try:
                import coverage
                coverage.process_startup()
            finally:
                os.environ.pop("COVERAGE_PROCESS_START", None)
        return None


# once: site-packages can be on the path twice (a venv's lib64 link), and its .pth files run twice
if not any(type(f).__name__ == "_EventbusLaneCoverage" for f in sys.meta_path):
    sys.meta_path.insert(0, _EventbusLaneCoverage())
'''


def pth_line() -> str:
    return f"import os, sys; os.environ.get({ENV!r}) and exec({HOOK!r})\n"


def install() -> int:
    """Write the ``.pth``; 0 always."""
    write_pth(PTH, pth_line(), "Lanes under coverage start it at a first import of the package")
    return 0


if __name__ == "__main__":
    sys.exit(install())
