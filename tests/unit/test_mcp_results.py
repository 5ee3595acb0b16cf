"""An MCP tool result as the agent's pipeline takes it (`orbital.domain.mcp_results`)."""

from __future__ import annotations

import base64

import mcp_types as types
from orbital.domain import mcp_results

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(20)).decode()


def test_text_and_images_keep_the_node_result_shape() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="hello"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        ]
    )
    assert mcp_results.convert(result) == (
        {"content": [{"type": "text", "text": "hello"}, {"type": "image", "data": PNG, "mimeType": "image/png"}]},
        None,
    )


def test_the_wire_json_is_taken_too() -> None:
    assert mcp_results.convert({"content": [{"type": "text", "text": "x"}]}) == (
        {"content": [{"type": "text", "text": "x"}]},
        None,
    )


def test_an_image_of_another_type_or_not_base64_becomes_a_note() -> None:
    result, _ = mcp_results.convert(
        {
            "content": [
                {"type": "image", "data": PNG, "mimeType": "image/svg+xml"},
                {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            ]
        }
    )
    assert result == {
        "content": [
            {"type": "text", "text": "[image: image/svg+xml, 28 bytes: not shown]"},
            {"type": "text", "text": "[image: image/png, not valid base64: not shown]"},
        ]
    }


def test_audio_becomes_a_line_with_its_type_and_size() -> None:
    audio = base64.b64encode(bytes(3000)).decode()
    result, _ = mcp_results.convert({"content": [{"type": "audio", "data": audio, "mimeType": "audio/mpeg"}]})
    assert result == {"content": [{"type": "text", "text": "[audio: audio/mpeg, 2.9 KB: not shown]"}]}


def test_embedded_resources_and_links() -> None:
    result, _ = mcp_results.convert(
        {
            "content": [
                {"type": "resource", "resource": {"uri": "file:///a.md", "mimeType": "text/markdown", "text": "# A"}},
                {"type": "resource", "resource": {"uri": "file:///b.png", "mimeType": "image/png", "blob": PNG}},
                {"type": "resource", "resource": {"uri": "file:///c.zip", "mimeType": "application/zip", "blob": PNG}},
                {"type": "resource_link", "name": "doc", "uri": "https://x.test/doc", "mimeType": "text/html"},
                {"type": "resource_link", "name": "n", "title": "The title", "uri": "https://x.test/n"},
            ]
        }
    )
    assert result == {
        "content": [
            {"type": "text", "text": "[resource file:///a.md]\n# A"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "text", "text": "[resource file:///c.zip: application/zip, 28 bytes: not shown]"},
            {"type": "text", "text": "[resource link] doc: https://x.test/doc (text/html)"},
            {"type": "text", "text": "[resource link] The title: https://x.test/n"},
        ]
    }


def test_structured_content_is_kept_and_given_as_text_when_there_is_none() -> None:
    alone, _ = mcp_results.convert({"content": [], "structuredContent": {"t": 21}})
    assert alone == {"structuredContent": {"t": 21}, "content": [{"type": "text", "text": '{\n "t": 21\n}'}]}
    with_text, _ = mcp_results.convert(
        {"content": [{"type": "text", "text": "21 degrees"}], "structuredContent": {"t": 21}}
    )
    assert with_text == {"structuredContent": {"t": 21}, "content": [{"type": "text", "text": "21 degrees"}]}


def test_an_error_result_is_the_calls_error() -> None:
    assert mcp_results.convert({"content": [{"type": "text", "text": "bad city"}], "isError": True}) == (
        None,
        "bad city",
    )
    assert mcp_results.convert({"content": [], "isError": True}) == (None, mcp_results.FAILED)
    _, long = mcp_results.convert({"content": [{"type": "text", "text": "e" * 10_000}], "isError": True})
    assert long is not None and len(long) < 4100 and long.endswith("more characters]")


def test_an_empty_result_says_so() -> None:
    assert mcp_results.convert({"content": []}) == (
        {"content": [{"type": "text", "text": mcp_results.NO_CONTENT}]},
        None,
    )


def test_sizes_are_capped() -> None:
    huge, _ = mcp_results.convert({"content": [{"type": "text", "text": "a" * (mcp_results.MAX_TEXT_CHARS + 10)}]})
    assert huge is not None
    assert huge["content"][0]["text"].endswith("[… cut: 10 more characters]")
    many, _ = mcp_results.convert({"content": [{"type": "text", "text": "x"}] * (mcp_results.MAX_BLOCKS + 5)})
    assert many is not None and len(many["content"]) == mcp_results.MAX_BLOCKS + 1
    assert many["content"][-1] == {"type": "text", "text": "[… 5 more content blocks not shown]"}


def test_unknown_blocks_are_named_not_passed_on() -> None:
    result, _ = mcp_results.convert({"content": [{"type": "hologram", "data": "…"}, "junk", {"type": "text"}]})
    assert result == {"content": [{"type": "text", "text": "[hologram content: not shown]"}]}
