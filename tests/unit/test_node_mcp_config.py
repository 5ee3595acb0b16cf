"""`orbital node --mcp` / `--mcp-config`: server definitions, and the tool definitions a node announces for them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mcp_types as types
import pytest
from orbital.domain.capabilities import validate_node_runtime
from orbital.node import cli
from orbital.node.mcp import MAX_ANNOUNCED_BYTES, MAX_DESCRIPTION_CHARS, MAX_TOOLS, McpHost, tool_definitions
from orbital.node.mcp_config import McpConfigError, StdioServer, combine, load_config, parse_flag
from orbital.node.runtime import node_runtime
from orbital.node.tools import TOOL_NAMES


def test_flag_splits_the_command_as_a_shell_would_without_running_one() -> None:
    server = parse_flag("""files=npx -y "@scope/server files" --root '/tmp/a b'""")
    assert server == StdioServer("files", "npx", ("-y", "@scope/server files", "--root", "/tmp/a b"))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("files", "expected NAME='command args...'"),
        ("=npx x", "a server name is"),
        ("my_files=npx x", "a server name is"),
        ("files=", "the command is empty"),
        ("files=npx 'unclosed", "cannot split the command"),
    ],
)
def test_bad_flags_are_refused_with_a_reason(value: str, message: str) -> None:
    with pytest.raises(McpConfigError, match=message):
        parse_flag(value)


def test_config_file_in_json_with_env_from_the_nodes_environment(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "servers": {
                    "gh": {
                        "command": "gh-mcp",
                        "args": ["--stdio"],
                        "env": {"GITHUB_TOKEN": "${GH_TOKEN}", "MODE": "read-${LEVEL}"},
                        "cwd": "repos",
                        "timeoutMs": 5000,
                    },
                    "off": {"command": "x", "disabled": True},
                }
            }
        )
    )
    (server,) = load_config(path, {"GH_TOKEN": "s3cret", "LEVEL": "only"})
    assert server == StdioServer(
        "gh", "gh-mcp", ("--stdio",), {"GITHUB_TOKEN": "s3cret", "MODE": "read-only"}, "repos", 5000
    )


def test_config_file_in_yaml_under_the_desktop_clients_key(tmp_path: Path) -> None:
    path = tmp_path / "mcp.yaml"
    path.write_text("mcpServers:\n  notes:\n    command: notes-server\n    args: [serve]\n")
    assert load_config(path, {}) == [StdioServer("notes", "notes-server", ("serve",))]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"servers": {"a": {"command": "x", "env": {"T": "${MISSING}"}}}}, r"\$\{MISSING\} is not set"),
        ({"servers": {"a": {"command": "x", "env": {"T": "${ORBITAL_TOKEN}"}}}}, "never passed to a server"),
        ({"servers": {"a": {"url": "https://x"}}}, "unknown key"),
        ({"servers": {"a": {"command": "x", "type": "sse"}}}, "only stdio servers"),
        ({"servers": {"a": {"args": ["x"]}}}, "command is required"),
        ({"servers": {"a": {"command": "x", "args": "x y"}}}, "args must be a list"),
        ({"servers": {"a": {"command": "x", "timeoutMs": 10}}}, "timeoutMs must be"),
        ({"servers": {"a_b": {"command": "x"}}}, "a server name is"),
        ({"servers": {}, "mcpServers": {}}, "not both"),
        ([], "expected an object"),
    ],
)
def test_bad_config_files_are_refused_with_a_reason(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(data))
    with pytest.raises(McpConfigError, match=message):
        load_config(path, {"ORBITAL_TOKEN": "node-token"})


def test_unreadable_or_malformed_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json", {})
    bad = tmp_path / "bad.json"
    bad.write_text("{servers:")
    with pytest.raises(McpConfigError, match="not valid JSON"):
        load_config(bad, {})


def test_a_name_given_twice_is_an_error() -> None:
    with pytest.raises(McpConfigError, match="defined twice"):
        combine([StdioServer("a", "x")], [StdioServer("a", "y")])


def test_cli_reads_flags_and_file_together(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": {"b": {"command": "bee"}}}))
    args = argparse.Namespace(mcp=["a=ay --x"], mcp_config=str(path))
    assert [s.name for s in cli.mcp_servers_of(args)] == ["b", "a"]
    with pytest.raises(ValueError, match="a server name is"):
        cli.mcp_servers_of(argparse.Namespace(mcp=["bad name=x"], mcp_config=None))


def _tool(name: str, description: str = "Does things.", schema: dict[str, object] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or {"type": "object"})


def test_announced_names_fit_64_characters_with_the_node_id_in_front() -> None:
    node_id = "a-rather-long-node-identifier"
    long = "search_" + "very_" * 20 + "deep"
    definitions, names = tool_definitions("files", [_tool("read"), _tool(long), _tool("hé llo")], node_id)
    assert all(len(f"{node_id}__{d['name']}") <= 64 for d in definitions)
    assert names["mcp__files__read"] == "read"
    assert sorted(names.values()) == sorted(["read", long, "hé llo"])
    assert all(name.startswith("mcp__files__") for name in names)
    again, _ = tool_definitions("files", [_tool("hé llo"), _tool(long), _tool("read")], node_id)
    assert again == definitions  # stable: the same tools give the same names in any order


def test_a_node_id_too_long_to_leave_room_for_names_announces_nothing() -> None:
    assert tool_definitions("files", [_tool("read")], "n" * 50) == ([], {})


def test_descriptions_schemas_and_counts_are_capped() -> None:
    huge_schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(300)},
    }
    tools = [_tool("a", "d" * 10_000, huge_schema), _tool("b", "", {"type": "array"})]
    tools += [_tool(f"t{i}") for i in range(MAX_TOOLS + 10)]
    definitions, _ = tool_definitions("s", tools, "n")
    assert len(definitions) == MAX_TOOLS
    by_name = {d["name"]: d for d in definitions}
    assert len(by_name["mcp__s__a"]["description"]) < MAX_DESCRIPTION_CHARS + 200
    assert by_name["mcp__s__a"]["description"].endswith("(MCP server s on this node, tool 'a')")
    assert by_name["mcp__s__a"]["inputSchema"] == {"type": "object"}
    assert by_name["mcp__s__b"]["inputSchema"] == {"type": "object"}
    assert by_name["mcp__s__b"]["description"] == "(MCP server s on this node, tool 'b')"


def test_the_runtime_declares_mcp_tools_so_the_gateway_accepts_them() -> None:
    mcp_names = ["mcp__files__read", "mcp__files__write"]
    runtime = node_runtime(TOOL_NAMES, mcp_tool_names=mcp_names, environ={})
    checked = validate_node_runtime("n", runtime, [*TOOL_NAMES, *mcp_names])
    assert checked["toolCapabilities"]["mcp__files__read"] == ["shell.exec"]


def test_all_announced_mcp_tools_together_stay_within_their_budget(tmp_path: Path) -> None:
    host = McpHost([StdioServer("a", "x"), StdioServer("b", "y")], node_id="n", workspace=tmp_path)
    for name in ("a", "b"):
        tools = [_tool(f"t{i}", "d" * MAX_DESCRIPTION_CHARS) for i in range(MAX_TOOLS)]
        host._states[name].definitions, host._states[name].names = tool_definitions(name, tools, "n")
    announced = host.definitions()
    assert len(json.dumps(announced)) <= MAX_ANNOUNCED_BYTES
    assert announced[0]["name"] == "mcp__a__t0"  # the first servers' first tools are kept
    assert 0 < len(announced) < 2 * MAX_TOOLS
