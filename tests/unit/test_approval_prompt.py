"""The pieces of a messenger's approval prompt: the buttons' callback data (small, bound to one approval and one
decision, unforgeable without the account's webhook secret), who can answer in which chat, and the decided text."""

from __future__ import annotations

import pytest
from orbital.channels import approval_prompt as ap

SECRET = "wh-secret_0123456789abcdef"
PROMPT = (
    'Run paused: tool approval required.\nTool: n1__Bash\nArgs: {"command":"ls"}\nPolicy rule: ask-shell\n'
    'Reply with "yes" to approve or "no" to deny.'
)


def test_callback_data_round_trips_and_fits_telegrams_limit() -> None:
    for decision in ("approve", "deny"):
        data = ap.callback_data(SECRET, "1a2b3c4d", decision)
        assert len(data.encode()) <= 64
        assert ap.parse_callback(SECRET, data) == ("1a2b3c4d", decision)
    board = ap.keyboard(SECRET, "1a2b3c4d")
    assert [b["text"] for b in board["inline_keyboard"][0]] == ["Approve", "Deny"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d.replace(":d:", ":a:"),  # a Deny turned into an Approve
        lambda d: d.replace("1a2b3c4d", "1a2b3c4e"),  # the same press aimed at another approval
        lambda d: d[:-1] + ("0" if d[-1] != "0" else "1"),
        lambda d: d.upper(),
        lambda d: d + " ",
        lambda d: "",
    ],
)
def test_tampered_callback_data_is_refused(tamper: object) -> None:
    data = ap.callback_data(SECRET, "1a2b3c4d", "deny")
    assert ap.parse_callback(SECRET, tamper(data)) is None  # type: ignore[operator]


def test_callback_data_of_another_secret_or_shape_is_refused() -> None:
    assert ap.parse_callback("another-secret", ap.callback_data(SECRET, "1a2b3c4d", "approve")) is None
    for junk in (None, 42, "ap:1a2b3c4d:a", "ap:zzzzzzzz:a:0000000000000000", "something else"):
        assert ap.parse_callback(SECRET, junk) is None


def test_owners_answer_in_their_dm_and_in_groups_only() -> None:
    config = {"owners": ["telegram:1111", "whatsapp:+1555"]}
    assert ap.answerable_here(config, {"channel": "telegram", "peer": {"kind": "dm", "id": "1111"}})
    assert not ap.answerable_here(config, {"channel": "telegram", "peer": {"kind": "dm", "id": "2222"}})
    assert ap.answerable_here(config, {"channel": "telegram", "peer": {"kind": "group", "id": "-100"}})
    assert not ap.answerable_here({"owners": ["whatsapp:+1555"]}, {"channel": "telegram", "peer": {"kind": "group"}})
    assert not ap.answerable_here({}, {"channel": "telegram", "peer": {"kind": "dm", "id": "1111"}})


def test_the_prompt_says_where_to_answer_and_shows_the_decision() -> None:
    approval = {"approvalId": "1a2b3c4d", "tool": "n1__Bash", "prompt": PROMPT}
    assert ap.prompt_text(approval, answerable=True) == PROMPT
    elsewhere = ap.prompt_text(approval, answerable=False)
    assert ap.REPLY_LINE not in elsewhere and elsewhere.endswith(ap.OWNER_ELSEWHERE)
    by = {"kind": "channel", "id": "telegram:1111", "label": "Ada"}
    decided = ap.decided_text(PROMPT, {"decision": "approve", "by": by, "via": "telegram"})
    assert decided.startswith("Run paused: tool approval required.\nTool: n1__Bash")
    assert decided.endswith("\n\nApproved by Ada (telegram).") and ap.REPLY_LINE not in decided
    assert (
        ap.outcome_line({"decision": "deny", "by": {"label": "owner"}, "via": "console"})
        == "Denied by owner (console)."
    )
    assert ap.outcome_line({"decision": "timeout", "via": "timeout"}) == "Timed out: denied."
    assert ap.outcome_line({"decision": "cancel", "via": "stop"}) == "Cancelled: the run was stopped."


def test_a_telegram_user_is_named_exactly() -> None:
    user = {"id": 1111, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"}
    assert ap.sender_identity("telegram", user) == {"kind": "channel", "id": "telegram:1111", "label": "Ada Lovelace"}
    assert ap.sender_identity("telegram", {"id": 7, "username": "x"})["label"] == "@x"
