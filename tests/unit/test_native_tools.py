"""The twelve native tool definitions: names, order, and well-formed input schemas."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from orbital.tools.definitions import NATIVE_TOOL_NAMES, NATIVE_TOOLS, native_tool_definitions

EXPECTED = [
    "gsv__ListFiles",
    "gsv__ReadFile",
    "gsv__WriteFile",
    "gsv__EditFile",
    "gsv__DeleteFile",
    "gsv__ConfigGet",
    "gsv__LogsGet",
    "gsv__Cron",
    "gsv__Message",
    "gsv__SessionsList",
    "gsv__SessionSend",
    "gsv__Transfer",
]

# Parameters (name -> JSON type) and required fields as the protocol defines them.
PARAMS: dict[str, tuple[dict[str, str], list[str]]] = {
    "gsv__ListFiles": ({"path": "string"}, []),
    "gsv__ReadFile": ({"path": "string", "offset": "number", "limit": "number"}, ["path"]),  # offset/limit: ours
    "gsv__WriteFile": ({"path": "string", "content": "string"}, ["path", "content"]),
    "gsv__EditFile": (
        {"path": "string", "oldString": "string", "newString": "string", "replaceAll": "boolean"},
        ["path", "oldString", "newString"],
    ),
    "gsv__DeleteFile": ({"path": "string"}, ["path"]),
    "gsv__ConfigGet": ({"path": "string"}, []),
    "gsv__LogsGet": ({"nodeId": "string", "lines": "number"}, []),
    "gsv__Cron": (
        {
            "action": "string",
            "id": "string",
            "mode": "string",
            "agentId": "string",
            "includeDisabled": "boolean",
            "limit": "number",
            "offset": "number",
            "job": "object",
            "patch": "object",
            "jobId": "string",
        },
        ["action"],
    ),
    "gsv__Message": (
        {
            "text": "string",
            "channel": "string",
            "to": "string",
            "peerKind": "string",
            "accountId": "string",
            "replyToId": "string",
        },
        ["text"],
    ),
    "gsv__SessionsList": ({"limit": "number", "offset": "number", "messageLimit": "number"}, []),
    "gsv__SessionSend": (
        {"sessionKey": "string", "message": "string", "waitSeconds": "number"},
        ["sessionKey", "message"],
    ),
    "gsv__Transfer": ({"source": "string", "destination": "string"}, ["source", "destination"]),
}


def test_names_and_order() -> None:
    assert [t["name"] for t in NATIVE_TOOLS] == EXPECTED
    assert list(NATIVE_TOOL_NAMES) == EXPECTED


def _walk(schema: dict[str, Any]) -> None:
    """Every object schema names only existing properties as required; every property has a type."""
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            assert name in props, f"required {name} not in properties"
        for sub in props.values():
            assert "type" in sub
            _walk(sub)


@pytest.mark.parametrize("tool", NATIVE_TOOLS, ids=lambda t: t["name"])
def test_schema_is_valid(tool: dict[str, Any]) -> None:
    assert set(tool) == {"name", "description", "inputSchema"}
    assert isinstance(tool["description"], str) and tool["description"].strip()
    schema = tool["inputSchema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    _walk(schema)
    params, required = PARAMS[tool["name"]]
    assert {k: v["type"] for k, v in schema["properties"].items()} == params
    assert schema.get("required", []) == required


def test_cron_nested_shapes() -> None:
    cron = next(t for t in NATIVE_TOOLS if t["name"] == "gsv__Cron")["inputSchema"]
    props = cron["properties"]
    assert props["action"]["enum"] == ["status", "list", "add", "update", "remove", "run", "runs"]
    assert props["mode"]["enum"] == ["due", "force"]
    job = props["job"]
    assert job["required"] == ["name", "schedule", "spec"]
    assert job["properties"]["schedule"]["required"] == ["kind"]
    assert job["properties"]["spec"]["required"] == ["mode"]
    assert "required" not in props["patch"]
    assert set(props["patch"]["properties"]) == set(job["properties"])
    validator = jsonschema.Draft202012Validator(cron)
    ok = {
        "action": "add",
        "job": {
            "name": "n",
            "schedule": {"kind": "every", "everyHours": 2},
            "spec": {"mode": "systemEvent", "text": "x"},
        },
    }
    assert validator.is_valid(ok)
    assert not validator.is_valid({"action": "explode"})
    assert not validator.is_valid({"job": {}})


def test_message_peer_kind_enum() -> None:
    msg = next(t for t in NATIVE_TOOLS if t["name"] == "gsv__Message")["inputSchema"]
    assert msg["properties"]["peerKind"]["enum"] == ["dm", "group", "channel", "thread"]


def test_definitions_copy_is_independent() -> None:
    copy = native_tool_definitions()
    copy[0]["name"] = "changed"
    copy[7]["inputSchema"]["properties"]["job"]["required"].append("x")
    assert NATIVE_TOOLS[0]["name"] == "gsv__ListFiles"
    assert NATIVE_TOOLS[7]["inputSchema"]["properties"]["job"]["required"] == ["name", "schedule", "spec"]


SEED_LEADS = {
    "gsv__ListFiles": "List files and directories in the agent's workspace.",
    "gsv__ReadFile": "Read a file from the agent's workspace.",
    "gsv__WriteFile": "Write or create a file in the agent's workspace.",
    "gsv__EditFile": "Edit a file by replacing exact text matches.",
    "gsv__DeleteFile": "Delete a file from the agent's workspace.",
    "gsv__ConfigGet": "Inspect the Gateway configuration.",
    "gsv__LogsGet": "Fetch recent log lines from a connected node.",
    "gsv__Cron": "Manage scheduled cron jobs.",
    "gsv__Message": "Send a message to a channel or user.",
    "gsv__SessionsList": "List active sessions with metadata.",
    "gsv__SessionSend": "Send a message into another session.",
    "gsv__Transfer": "Transfer a file between connected nodes and/or the",
}


@pytest.mark.parametrize("name", EXPECTED)
def test_descriptions_open_with_the_documented_words(name: str) -> None:
    """Agents and clients that know GSV's tools recognize them by the first words of their descriptions."""
    tool = next(t for t in NATIVE_TOOLS if t["name"] == name)
    assert tool["description"].startswith(SEED_LEADS[name])
