"""The journal: frames that detect a torn tail, group commit that shares fsyncs, failures that reach every waiter."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from orbital.local import journal as jr


def test_records_round_trip(tmp_path: Path) -> None:
    journal = jr.Journal(tmp_path, 1)
    seqs = [journal.append({"n": i, "text": "é" * i}) for i in range(5)]
    journal.wait(seqs[-1])
    journal.close()
    result = jr.read_records(jr.journal_path(tmp_path, 1))
    assert [r["n"] for r in result.records] == [0, 1, 2, 3, 4]
    assert result.records[3]["text"] == "ééé"
    assert not result.torn and result.good_bytes == jr.journal_path(tmp_path, 1).stat().st_size


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00\x00",  # half a header
        jr.encode({"n": 99})[:-3],  # a payload cut short
        jr.encode({"n": 99})[:8] + b"X" * (len(jr.encode({"n": 99})) - 8),  # a payload that fails its checksum
        b"\xff\xff\xff\xff\x00\x00\x00\x00",  # a length nobody wrote
    ],
)
def test_a_torn_tail_is_detected_and_nothing_before_it_is_lost(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "j.log"
    good = b"".join(jr.encode({"n": i}) for i in range(3))
    path.write_bytes(good + tail)
    result = jr.read_records(path)
    assert [r["n"] for r in result.records] == [0, 1, 2]
    assert result.torn and result.good_bytes == len(good)


def test_concurrent_writers_share_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(jr.os, "fsync", counting_fsync)
    journal = jr.Journal(tmp_path, 1)
    calls.clear()
    barrier = threading.Barrier(8)

    def writer(t: int) -> None:
        barrier.wait()
        for i in range(50):
            journal.wait(journal.append({"t": t, "i": i}))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    journal.close()
    records = jr.read_records(jr.journal_path(tmp_path, 1)).records
    assert len(records) == 400
    for t in range(8):  # each writer's records in its own order
        assert [r["i"] for r in records if r["t"] == t] == list(range(50))
    assert len(calls) < 400  # flushes were shared


def test_a_failed_write_reaches_every_waiter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = jr.Journal(tmp_path, 1)

    def broken(frames: list[bytes]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "_write", broken)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            journal.wait(journal.append({"x": 1}))
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)  # nobody waits forever
    assert len(errors) == 4


def test_rotation_moves_on_to_the_next_generation(tmp_path: Path) -> None:
    journal = jr.Journal(tmp_path, 3)
    journal.wait(journal.append({"g": 3}))
    assert journal.rotate() == 4
    journal.wait(journal.append({"g": 4}))
    journal.close()
    assert jr.generations(tmp_path) == [3, 4]
    assert [r["g"] for r in jr.read_records(jr.journal_path(tmp_path, 4)).records] == [4]
