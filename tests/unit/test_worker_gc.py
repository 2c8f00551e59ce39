"""paused_gc: the cyclic collector is off inside, and afterwards exactly as it was, with nested
and concurrent users (the driver parses replies on several threads)."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from spark_eventbus.core import worker_gc
from spark_eventbus.core.worker_gc import paused_gc


@pytest.fixture(autouse=True)
def _as_a_spark_worker(monkeypatch):  # type: ignore[no-untyped-def]
    """paused_gc acts in Spark's Python workers only; these tests are one."""
    monkeypatch.setattr(worker_gc, "_in_worker", True)


def test_outside_a_spark_worker_the_collector_is_left_alone(monkeypatch):
    monkeypatch.setattr(worker_gc, "_in_worker", False)
    with paused_gc():
        assert gc.isenabled()


def test_paused_gc_turns_the_collector_off_and_back_on():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: still off, and not turned on by the inner block's end
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_gc_leaves_a_collector_the_process_turned_off_off():
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_gc_is_back_on_after_an_error():
    try:
        with paused_gc():
            raise ValueError("a reply that failed to parse")
    except ValueError:
        pass
    assert gc.isenabled()


def test_overlapping_threads_turn_it_back_on_when_the_last_leaves():
    inside, leave_first, first_left = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with paused_gc():
            inside.set()
            leave_first.wait(10)
        first_left.set()

    t = threading.Thread(target=first)
    t.start()
    inside.wait(10)
    with paused_gc():
        leave_first.set()
        first_left.wait(10)  # the first thread left while this one is still inside
        seen.append(gc.isenabled())
    t.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_a_child_forked_during_a_pause_has_its_collector_on():
    with paused_gc():
        pid = os.fork()
        if pid == 0:  # the child: no thread of it is inside the block
            ok = gc.isenabled() and worker_gc._pausing == 0
            with paused_gc():
                ok = ok and not gc.isenabled()
            os._exit(0 if ok and gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.isenabled()
