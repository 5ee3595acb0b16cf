"""The names MCP servers' tools are offered under (`orbital.domain.mcp_names`, ADR 0045)."""

from __future__ import annotations

import hashlib
import re

import pytest
from orbital.domain import mcp_names

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _hash(tool: str) -> str:
    return hashlib.sha256(tool.encode()).hexdigest()[:6]


def test_valid_names_keep_their_spelling() -> None:
    names = mcp_names.exposed_names("github", ["search_issues", "create-pr", "Get2"])
    assert names == {
        "mcp__github__Get2": "Get2",
        "mcp__github__create-pr": "create-pr",
        "mcp__github__search_issues": "search_issues",
    }


def test_other_characters_become_underscores() -> None:
    assert mcp_names.exposed_names("fs", ["files.read", "a b/c"]) == {
        "mcp__fs__a_b_c": "a b/c",
        "mcp__fs__files_read": "files.read",
    }


def test_a_long_name_is_cut_and_ends_in_its_hash_within_the_budget() -> None:
    tool = "x" * 100
    names = mcp_names.exposed_names("srv", [tool])
    (exposed,) = names
    assert len(exposed) == 64 and VALID.match(exposed)
    assert exposed.endswith("_" + _hash(tool))
    assert names[exposed] == tool


def test_a_node_budget_leaves_room_for_the_node_id() -> None:
    node_id = "laptop-1"
    tool = "y" * 80
    (exposed,) = mcp_names.exposed_names("git", [tool], budget=64 - len(node_id) - 2)
    assert len(f"{node_id}__{exposed}") == 64
    assert exposed.endswith("_" + _hash(tool))


def test_names_that_would_collide_are_told_apart_by_their_hash_and_the_valid_one_keeps_its_own() -> None:
    names = mcp_names.exposed_names("srv", ["a.b", "a b", "a_b"])
    assert names["mcp__srv__a_b"] == "a_b"
    assert names[f"mcp__srv__a_b_{_hash('a.b')}"] == "a.b"
    assert names[f"mcp__srv__a_b_{_hash('a b')}"] == "a b"
    assert len(names) == 3


def test_names_are_stable_whatever_the_order_of_the_list() -> None:
    tools = ["q.1", "q 1", "z" * 90, "plain", "ü-umlaut"]
    first = mcp_names.exposed_names("srv", tools)
    assert mcp_names.exposed_names("srv", list(reversed(tools))) == first
    assert all(VALID.match(name) for name in first)
    assert sorted(first.values()) == sorted(tools)


def test_duplicates_and_empty_names() -> None:
    names = mcp_names.exposed_names("srv", ["dup", "dup", ""])
    assert names == {"mcp__srv__dup": "dup", f"mcp__srv___{_hash('')}": ""}


@pytest.mark.parametrize("server", ["", "has_underscore", "x" * 33, "dots.no", "sp ace"])
def test_server_names_are_letters_digits_and_dashes(server: str) -> None:
    assert not mcp_names.valid_server_name(server)
    with pytest.raises(ValueError, match="1 to 32 letters, digits and dashes"):
        mcp_names.exposed_names(server, ["t"])


def test_a_budget_without_room_for_a_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="use a shorter server name"):
        mcp_names.exposed_names("s" * 32, ["t"], budget=40)


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("mcp__github__search", ("github", "search")),
        ("mcp__a-b__x__y", ("a-b", "x__y")),
        ("mcp__srv__", None),
        ("mcp__bad_name__x", None),
        ("n1__mcp__srv__x", None),
        ("gsv__Bash", None),
        ("mcp__", None),
    ],
)
def test_split(name: str, parts: tuple[str, str] | None) -> None:
    assert mcp_names.split(name) == parts
