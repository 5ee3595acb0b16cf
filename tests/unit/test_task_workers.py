"""The threads that run the Step Functions process's requests in the gateway (an execution's Lambda tasks): every
piece of work starts at once however many block, idle threads are reused, and idle ones end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orbital.local.sfn_worker import Workers


def _until(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_blocking_work_never_waits_for_a_thread() -> None:
    workers = Workers("orbital-test-block")
    many = 40
    together = threading.Barrier(many, timeout=10)
    passed: list[int] = []
    for i in range(many):
        workers.run(lambda i=i: (together.wait(), passed.append(i)))
    _until(lambda: len(passed) == many, "all forty ran at the same time")
    _until(lambda: workers.idle == many, "and are idle after")


def test_idle_threads_are_reused_then_end() -> None:
    name = "orbital-test-reuse"
    workers = Workers(name, idle_seconds=0.5)
    done = threading.Event()
    workers.run(done.set)
    assert done.wait(10)
    _until(lambda: workers.idle == 1, "one idle thread")
    ran: list[str] = []
    for _ in range(50):  # one at a time: the same thread takes each
        step = threading.Event()
        workers.run(lambda step=step: (ran.append(threading.current_thread().name), step.set()))
        assert step.wait(10)
        _until(lambda: workers.idle == 1, "idle again")
    assert len(ran) == 50 and _threads(name) == 1
    _until(lambda: workers.idle == 0 and _threads(name) == 0, "the idle thread ended")
    again = threading.Event()
    workers.run(again.set)  # and work still runs after
    assert again.wait(10)


def test_failing_work_keeps_its_thread() -> None:
    workers = Workers("orbital-test-fail")

    def fail() -> None:
        raise RuntimeError("boom")

    workers.run(fail)
    _until(lambda: workers.idle == 1, "the thread survived")
    after = threading.Event()
    workers.run(after.set)
    assert after.wait(10)
