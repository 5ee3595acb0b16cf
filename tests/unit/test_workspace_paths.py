"""Workspace path rules: normalization, traversal, virtual skills paths, content types, agent ids."""

from __future__ import annotations

import pytest
from orbital.domain.workspace_paths import (
    InvalidPathError,
    content_type_for,
    is_virtual_skills_path,
    normalize_relative_path,
    skills_suffix,
    validate_agent_id,
)
from orbital.errors import BadRequestError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ""),
        ("", ""),
        ("/", ""),
        ("  /  ", ""),
        ("///", ""),
        ("SOUL.md", "SOUL.md"),
        ("  SOUL.md  ", "SOUL.md"),
        ("/memory/", "memory"),
        ("memory/2026-01-01.md", "memory/2026-01-01.md"),
        ("memory//2026-01-01.md", "memory/2026-01-01.md"),
        ("./memory/./x.md", "memory/x.md"),
        ("notes/v1..2.md", "notes/v1..2.md"),
        ("a/.../b", "a/.../b"),
    ],
)
def test_normalize(raw: str | None, expected: str) -> None:
    assert normalize_relative_path(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["..", "../x", "a/../b", "a/..", "/../agents/other/SOUL.md", "a/ .. /b", "a\\..\\b", "..\\x", "skills/../SOUL.md"],
)
def test_traversal_rejected(raw: str) -> None:
    with pytest.raises(InvalidPathError) as info:
        normalize_relative_path(raw)
    assert info.value.message == "Path traversal not allowed"
    assert info.value.code == 400


def test_nul_rejected() -> None:
    with pytest.raises(InvalidPathError) as info:
        normalize_relative_path("a\x00b.md")
    assert info.value.code == 400


def test_virtual_skills_paths() -> None:
    assert is_virtual_skills_path("skills")
    assert is_virtual_skills_path("skills/demo/SKILL.md")
    assert not is_virtual_skills_path("skillset/x.md")
    assert not is_virtual_skills_path("memory/skills/x.md")
    assert not is_virtual_skills_path("")
    assert skills_suffix("skills") == ""
    assert skills_suffix("skills/demo/SKILL.md") == "demo/SKILL.md"
    with pytest.raises(ValueError):
        skills_suffix("memory/x.md")


@pytest.mark.parametrize(
    ("path", "ctype"),
    [
        ("SOUL.md", "text/markdown"),
        ("notes/README.MD", "text/markdown"),
        ("config.json", "application/json"),
        ("a/b.yaml", "text/yaml"),
        ("a/b.yml", "text/yaml"),
        ("script.sh", "text/plain"),
        ("noext", "text/plain"),
        ("md", "text/plain"),
        ("archive.md.txt", "text/plain"),
    ],
)
def test_content_type(path: str, ctype: str) -> None:
    assert content_type_for(path) == ctype


def test_agent_id_validation() -> None:
    assert validate_agent_id(None, "main") == "main"
    assert validate_agent_id("  ", "helper") == "helper"
    assert validate_agent_id("Helper", "main") == "helper"
    assert validate_agent_id("my agent", "main") == "my-agent"
    for bad in ("a/b", "..", "x..y", "a\\b", "a\x00"):
        with pytest.raises(BadRequestError) as info:
            validate_agent_id(bad, "main")
        assert info.value.message == f"Invalid agentId: {bad}"
    with pytest.raises(BadRequestError):
        validate_agent_id(5, "main")


def test_tool_result_paths() -> None:
    from orbital.domain.workspace_paths import is_tool_result_path, tool_result_path

    uuid = "0b5e1c2e-4f5d-4b7e-9c1a-2d3e4f5a6b7c"
    assert tool_result_path(uuid) == f"tool-results/{uuid}.txt"
    assert tool_result_path(uuid, "png") == f"tool-results/{uuid}.png"
    odd = ["a/../b", "a b", "x" * 300, "é", ".."]
    names = {tool_result_path(call_id) for call_id in odd} | {tool_result_path("a_b"), tool_result_path("a__b")}
    assert len(names) == len(odd) + 2  # made safe, and still one file per call
    for name in names:
        assert normalize_relative_path(name) == name and name.startswith("tool-results/") and len(name) < 200
    assert is_tool_result_path(tool_result_path("a/../b", "json"), "a/../b")
    assert not is_tool_result_path(tool_result_path("a"), "b")
    assert not is_tool_result_path(f"tool-results/{uuid}.exe", uuid)
    with pytest.raises(ValueError):
        tool_result_path(uuid, "exe")


def test_a_path_over_the_limit_is_refused_once_normalized() -> None:
    from orbital.domain.workspace_paths import MAX_PATH_BYTES, InvalidPathError, normalize_relative_path

    longest = "a" * MAX_PATH_BYTES
    assert normalize_relative_path(longest) == longest
    assert normalize_relative_path("//" + longest + "/./") == longest  # measured after normalizing
    with pytest.raises(InvalidPathError, match=r"Path too long: at most 900 bytes of UTF-8 \(901 given\)"):
        normalize_relative_path(longest + "b")
    with pytest.raises(InvalidPathError, match="902 given"):
        normalize_relative_path("é" * 451)  # bytes, not characters
