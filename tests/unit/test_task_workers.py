"""The threads that run the Step Functions process's requests in the gateway (an execution's Lambda tasks): every
piece of work starts at once however many block, idle threads are reused, and idle ones end."""

from __future__ import annotations

import threading

from orbital.local.sfn_worker import Workers

from tests.conftest import wait_for


def _threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_blocking_work_never_waits_for_a_thread() -> None:
    workers = Workers("orbital-test-block")
    many = 40
    together = threading.Barrier(many, timeout=10)
    passed: list[int] = []
    for i in range(many):
        workers.run(lambda i=i: (together.wait(), passed.append(i)))
    wait_for(lambda: len(passed) == many, 10, 0.005, what="all forty ran at the same time")
    wait_for(lambda: workers.idle == many, 10, 0.005, what="and are idle after")


def test_idle_threads_are_reused_then_end() -> None:
    name = "orbital-test-reuse"
    workers = Workers(name, idle_seconds=0.5)
    done = threading.Event()
    workers.run(done.set)
    assert done.wait(10)
    wait_for(lambda: workers.idle == 1, 10, 0.005, what="one idle thread")
    ran: list[str] = []
    for _ in range(50):  # one at a time: the same thread takes each
        step = threading.Event()
        workers.run(lambda step=step: (ran.append(threading.current_thread().name), step.set()))
        assert step.wait(10)
        wait_for(lambda: workers.idle == 1, 10, 0.005, what="idle again")
    assert len(ran) == 50 and _threads(name) == 1
    wait_for(lambda: workers.idle == 0 and _threads(name) == 0, 10, 0.005, what="the idle thread ended")
    again = threading.Event()
    workers.run(again.set)  # and work still runs after
    assert again.wait(10)


def test_failing_work_keeps_its_thread() -> None:
    workers = Workers("orbital-test-fail")

    def fail() -> None:
        raise RuntimeError("boom")

    workers.run(fail)
    wait_for(lambda: workers.idle == 1, 10, 0.005, what="the thread survived")
    after = threading.Event()
    workers.run(after.set)
    assert after.wait(10)
