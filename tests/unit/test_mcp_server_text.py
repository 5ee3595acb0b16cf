"""What `/mcp`'s tools make of the gateway's data: resource URIs of workspace paths and back, and a stored message
as one readable line."""

from __future__ import annotations

import pytest
from orbital.rest import mcp_server


@pytest.mark.parametrize("path", ["notes/plan.md", "a b/c#d?.txt", "skills/x/SKILL.md", "ü/ñ.md"])
def test_a_workspace_path_and_its_resource_uri_round_trip(path: str) -> None:
    uri = mcp_server.resource_uri(path)
    assert uri.startswith("orbital://workspace/")
    assert " " not in uri and "#" not in uri and "?" not in uri
    assert mcp_server.path_of(uri) == path


@pytest.mark.parametrize("uri", ["file:///etc/passwd", "orbital://workspace/", "orbital://other/x.md", ""])
def test_other_uris_name_no_workspace_file(uri: str) -> None:
    assert mcp_server.path_of(uri) is None


def test_a_message_with_a_tool_call_and_a_tool_result_read_as_lines() -> None:
    call = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "toolCall", "id": "c1", "name": "box__Bash", "arguments": {"command": "ls"}},
        ],
    }
    assert mcp_server._message_text(call) == 'Let me look. (calls box__Bash {"command": "ls"})'
    result = {
        "role": "toolResult",
        "toolName": "box__Bash",
        "isError": True,
        "content": [{"type": "text", "text": "no"}],
    }
    assert mcp_server._message_text(result) == "(box__Bash result, error) no"
    picture = {"role": "user", "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}
    assert mcp_server._message_text(picture) == "(an image)"
    failed = {"role": "assistant", "content": [], "errorMessage": "The model failed"}
    assert mcp_server._message_text(failed) == "The model failed"


def test_a_long_message_is_cut_and_says_how_much_is_left() -> None:
    text = "x" * (mcp_server.MESSAGE_CHARS + 25)
    shown = mcp_server._message_text({"role": "user", "content": text})
    assert shown == "x" * mcp_server.MESSAGE_CHARS + " … (25 more characters)"


def test_the_tools_scopes_are_chat_to_send_and_read_for_the_rest() -> None:
    scopes = {name: tool.scope for name, tool in mcp_server.TOOLS.items()}
    assert scopes == {
        "send_message": "chat",
        "list_sessions": "read",
        "read_session": "read",
        "list_files": "read",
        "read_file": "read",
    }
    for tool in mcp_server.TOOLS.values():
        assert tool.schema["type"] == "object" and tool.schema["additionalProperties"] is False
