"""How a spend refusal is said to each client, when a channel conversation may be told again, and `/status`'s
dollars (orbital.domain.spend_words, `orbital chat`'s ChatDriver)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from orbital.cli.chat import CallFailedError, ChatDriver
from orbital.domain import spend_words
from orbital.errors import RpcError

from tests.unit.test_chat_cli import FakeConn


def _ms(*args: int, tz: Any = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def test_the_refusal_is_found_in_the_message_and_said_in_exoclaws_words() -> None:
    found = spend_words.refusal_in("spend limit reached (daily: $4.98 / $5.00)")
    assert found == spend_words.SpendRefusal("daily", 4.98, 5.0)
    assert found.exoclaw_message == "spend limit exceeded (daily: $4.98/$5.00)"
    assert found.sentence == "spend limit reached (daily: $4.98 / $5.00)"
    note = spend_words.refusal_in("Spend limit reached (monthly: $20.01 / $20.00). Raise it with config.set ...")
    assert note is not None and note.exoclaw_message == "spend limit exceeded (monthly: $20.01/$20.00)"
    assert spend_words.refusal_in("Token budget exceeded (daily: 10/5)") is None
    assert spend_words.refusal_in(None) is None


def test_an_exceptions_attributes_win_over_its_text() -> None:
    class Refused(RpcError):
        period, used, limit = "session", 1.234, 1.0

    assert spend_words.refusal_of(Refused("something else")) == spend_words.SpendRefusal("session", 1.234, 1.0)
    assert spend_words.refusal_of(RpcError("spend limit reached (session: $1.00 / $1.00)")) is not None
    assert spend_words.refusal_of(RuntimeError("the table is throttled")) is None


def test_a_day_ends_at_midnight_in_the_configured_time_zone() -> None:
    berlin = spend_words.time_zone("Europe/Berlin")
    day = spend_words.notice_period("daily", _ms(2026, 11, 28, 22, 30), berlin, None)  # 23:30 in Berlin
    assert day.name == "daily:2026-11-28" and day.ends_at_s == _ms(2026, 11, 29, tz=ZoneInfo("Europe/Berlin")) // 1000
    after = spend_words.notice_period("daily", _ms(2026, 11, 28, 23, 30), berlin, None)  # 00:30 the next day
    assert after.name == "daily:2026-11-29"
    spring = spend_words.notice_period("daily", _ms(2026, 3, 29, 0, 30), berlin, None)  # a 23-hour day
    assert spring.ends_at_s == _ms(2026, 3, 30, tz=ZoneInfo("Europe/Berlin")) // 1000
    month = spend_words.notice_period("monthly", _ms(2026, 12, 31, 12), UTC, None)
    assert month.name == "monthly:2026-12" and month.ends_at_s == _ms(2027, 1, 1) // 1000
    session = spend_words.notice_period("session", _ms(2026, 1, 1), UTC, "s-1")
    assert session.name == "session:s-1" and session.ends_at_s > _ms(2026, 1, 1) // 1000
    assert spend_words.time_zone("Not/AZone") is UTC and spend_words.time_zone(None) is UTC


STATUS = {
    "currency": "USD",
    "timeZone": "UTC",
    "periods": [
        {"period": "session", "scope": "session:agent:main:main", "usedUsd": 0.12, "reservedUsd": 0, "limitUsd": None},
        {"period": "daily", "scope": "global", "usedUsd": 1.3, "reservedUsd": 0.1, "limitUsd": 5},
        {"period": "daily", "scope": "agent:main", "usedUsd": 9, "reservedUsd": 0, "limitUsd": 10},
        {"period": "monthly", "scope": "global", "usedUsd": 3.1, "reservedUsd": 0, "limitUsd": None},
    ],
    "top": {"sessions": [], "jobs": []},
    "alertAt": 0.8,
}


def test_status_line_shows_the_session_and_the_gateways_day_and_month() -> None:
    line = spend_words.status_line(STATUS)
    assert line == "Spend: $0.12 this session · $1.40 / $5.00 today · $3.10 this month"
    assert spend_words.status_line({"periods": []}) is None
    assert spend_words.status_line("nonsense") is None


def test_slash_status_shows_dollars_beside_tokens() -> None:
    response = "Session: main\nMessages: 2\nTokens: 10 in / 5 out\nModel: fake/m"
    conn = FakeConn(
        answers={"chat.send": {"status": "command", "command": "status", "response": response}, "spend.status": STATUS}
    )
    sent = ChatDriver(conn, "main").send("/status")  # type: ignore[arg-type]
    assert sent.result["response"].split("\n") == [
        "Session: main",
        "Messages: 2",
        "Tokens: 10 in / 5 out",
        "Spend: $0.12 this session · $1.40 / $5.00 today · $3.10 this month",
        "Model: fake/m",
    ]
    assert ("spend.status", {"sessionKey": "main"}) in conn.calls


@pytest.mark.parametrize("answer", [CallFailedError("spend.status", 404, "unknown method"), TimeoutError("slow")])
def test_slash_status_without_spend_status_is_unchanged(answer: Exception) -> None:
    result = {"status": "command", "command": "status", "response": "Tokens: 1 in / 1 out"}
    conn = FakeConn(answers={"chat.send": result, "spend.status": answer})
    assert ChatDriver(conn, "main").send("/status").result == result  # type: ignore[arg-type]


def test_other_commands_do_not_ask_for_spend() -> None:
    conn = FakeConn(answers={"chat.send": {"status": "command", "command": "help", "response": "help"}})
    ChatDriver(conn, "main").send("/help")  # type: ignore[arg-type]
    assert [m for m, _ in conn.calls] == ["chat.send"]
