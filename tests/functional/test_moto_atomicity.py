"""Conditional writes are atomic under moto as they are on DynamoDB (the claim of a deferred call relies on it)."""

from __future__ import annotations

import threading

from orbital.errors import ConflictError
from orbital.store import conditions as cond


def test_concurrent_conditional_updates_have_one_winner(aws, services):
    table = services.table
    double_wins = 0
    for i in range(150):
        key = ("RACE", str(i))
        table.put(key, {}, attrs={"st": "pending"})
        wins: list[int] = []
        start = threading.Barrier(3)

        def claim(n: int, key: tuple[str, str] = key, wins: list[int] = wins) -> None:
            start.wait()
            try:
                table.update(key, set_attrs={"st": "done"}, condition=cond.eq("st", "pending"))
                wins.append(n)
            except ConflictError:
                pass

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert len(wins) >= 1
        double_wins += len(wins) > 1
    assert double_wins == 0
