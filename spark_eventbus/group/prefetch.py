"""Driver side: run one piece of work in a background thread while Spark runs a batch.

The stream reader uses it to ack the committed batch and pre-claim the next one; the work is
given as a callback, so this class knows nothing of claims.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# The work: gets an event that asks it to stop early (after its current Redis call), and
# returns True when it stopped early with more left to do.
Work = Callable[[threading.Event], bool]


class Prefetcher:
    """At most one background job at a time; its error is re-raised by :meth:`stop`/:meth:`join`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._busy = False
        self._error: BaseException | None = None

    def start(self, work: Work) -> None:
        self.join()
        self._stop = threading.Event()
        self._busy = False
        stop = self._stop

        def run() -> None:
            try:
                self._busy = work(stop)
            except BaseException as exc:  # re-raised in the caller's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Ask the job to stop after its current step and wait for it. True when it was
        interrupted with work left (more entries are waiting)."""
        self._stop.set()
        return self.join()

    def join(self) -> bool:
        """Wait for the job; re-raise its error. True when it stopped early with work left."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        busy, self._busy = self._busy, False
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return busy
