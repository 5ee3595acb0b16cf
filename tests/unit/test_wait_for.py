"""The tests' one polling helper: it returns what it waited for, and a wait that never ends says what it was."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path

import pytest

from tests.conftest import wait_for, wait_for_async


def test_the_first_truthy_value_is_returned_after_polling_for_it() -> None:
    calls = itertools.count(1)
    assert wait_for(lambda: [n] if (n := next(calls)) >= 3 else [], interval=0) == [3]


def test_a_condition_never_met_fails_naming_it() -> None:
    with pytest.raises(AssertionError, match=r"not seen within 0s: the answer"):
        wait_for(lambda: None, 0, 0, what="the answer")


def test_in_an_event_loop_other_tasks_run_while_it_waits() -> None:
    async def scenario() -> str:
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        loop.call_soon(seen.append, "done")  # runs only if the wait gives the loop a turn
        return await wait_for_async(lambda: seen and seen[0], 5, what="the callback")

    assert asyncio.run(scenario()) == "done"


def test_in_an_event_loop_a_condition_never_met_fails_naming_it() -> None:
    with pytest.raises(AssertionError, match=r"not seen within 0s: the callback"):
        asyncio.run(wait_for_async(lambda: False, 0, 0, what="the callback"))


def test_no_other_polling_helper_is_defined_in_the_tests() -> None:
    tests = Path(__file__).resolve().parents[1]
    helper = re.compile(r"^(?:async )?def _?(wait|wait_for\w*|wait_until|until|poll_until|eventually)\(", re.MULTILINE)
    copies = [
        f"{path.relative_to(tests)}: {found.group(1)}"
        for path in sorted(tests.rglob("*.py"))
        if path != tests / "conftest.py"
        for found in helper.finditer(path.read_text())
    ]
    assert copies == []
