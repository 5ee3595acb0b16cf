"""Fitting a node's tool results to the gateway's message limit (`orbital.domain.tool_results`), and the outbox
dropping a message that can never be sent."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from orbital.domain.tool_results import (
    ENVELOPE_BYTES,
    Saved,
    encoded_size,
    fit_tool_result,
    full_output,
)
from orbital.node.agent import NodeAgent
from orbital.node.options import NodeOptions

LIMITS = (ENVELOPE_BYTES + 600, 5_000, 20_000, 128 * 1024)
POINTER = "gsv:tool-results/c1.txt"


def numbered(count: int, width: int = 60) -> str:
    """Read's `content` for a file of `count` lines (some not ASCII)."""
    return "\n".join(f"{i + 1:>6}\t{'é' if i % 5 == 0 else 'e'}{'x' * width}" for i in range(count))


def saved_at(result: Any, path: str | None = POINTER, error: str | None = None) -> Saved:
    return Saved(full_output(result), path=path, error=error)


def test_a_result_that_fits_is_left_alone() -> None:
    params = {"callId": "c1", "result": {"content": "short", "lines": 1}}
    assert fit_tool_result(params, 5_000) is params
    big = {"callId": "c1", "result": {"content": numbered(10_000)}}
    assert fit_tool_result(big, None) is big


@pytest.mark.parametrize("limit", LIMITS)
def test_read_keeps_its_first_whole_lines_and_points_to_the_whole(limit: int) -> None:
    content = numbered(5_000)
    result = {"path": "/w/big.txt", "content": content, "lines": 5_000}
    fitted = fit_tool_result({"callId": "c1", "result": result}, limit, saved_at(result), "Read")
    assert encoded_size(fitted) <= limit
    shown = fitted["result"]
    assert shown["path"] == "/w/big.txt" and shown["truncated"] is True
    assert content.startswith(shown["content"]) and len(shown["content"]) < len(content)
    if "\n" in shown["content"]:  # whole lines (when there is room for one at least)
        assert content[len(shown["content"])] == "\n"
    assert shown["lines"] == (shown["content"].count("\n") + 1 if shown["content"] else 0)
    assert shown["fullOutput"] == {"path": POINTER, "bytes": len(content.encode())}
    assert POINTER in shown["note"] and "gsv__ReadFile" in shown["note"] and "offset and limit" in shown["note"]
    assert shown["note"].endswith("Read takes offset and limit (lines) to read on after the last line shown.")


@pytest.mark.parametrize("limit", LIMITS)
def test_bash_keeps_the_end_of_its_output(limit: int) -> None:
    output = "".join(f"line {i}\n" for i in range(20_000)) + "the end\n"
    result = {"status": "completed", "exitCode": 0, "output": output, "tail": output[-4000:], "truncated": False}
    fitted = fit_tool_result({"callId": "c1", "result": result}, limit, saved_at(result), "Bash")
    assert encoded_size(fitted) <= limit
    shown = fitted["result"]
    assert shown["exitCode"] == 0 and shown["truncated"] is True
    assert output.endswith(shown["output"]) and shown["output"].endswith("the end\n")
    assert output[-len(shown["output"]) - 1] == "\n"  # from the start of a line
    assert output.endswith(shown["tail"])
    assert shown["fullOutput"] == {"path": POINTER, "bytes": len(output)}


def test_lists_keep_their_first_items_and_the_whole_is_saved_as_json() -> None:
    matches = [f"/work/project/src/module_{i:05d}/file.py" for i in range(5_000)]
    result = {"pattern": "**/*.py", "basePath": "/work", "matches": matches, "count": 5_000}
    output = full_output(result)
    assert output.extension == "json" and json.loads(output.data) == result
    saved = Saved(output, path="gsv:tool-results/c1.json")
    fitted = fit_tool_result({"callId": "c1", "result": result}, 20_000, saved, "Glob")
    assert encoded_size(fitted) <= 20_000
    shown = fitted["result"]
    assert 0 < len(shown["matches"]) < 5_000 and shown["matches"] == matches[: len(shown["matches"])]
    assert shown["count"] == 5_000 and shown["pattern"] == "**/*.py"
    assert shown["fullOutput"] == {"path": "gsv:tool-results/c1.json", "bytes": len(output.data)}


def test_an_image_too_large_is_saved_as_an_image_and_described() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 1_000
    result = {
        "content": [
            {"type": "text", "text": "Read image file /w/pic.png [image/png, 256 KB]"},
            {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"},
        ]
    }
    output = full_output(result)
    assert (output.data, output.extension, output.size) == (png, "png", len(png))
    saved = Saved(output, path="gsv:tool-results/c1.png")
    fitted = fit_tool_result({"callId": "c1", "result": result}, 128 * 1024, saved, "Read")
    blocks = fitted["result"]["content"]
    assert blocks[0] == result["content"][0]  # type: ignore[index]
    assert blocks[1]["type"] == "text" and blocks[1]["text"].startswith("[image (image/png) not shown] ")
    assert "gsv:tool-results/c1.png (not text: gsv__Transfer copies it to a node)" in blocks[1]["text"]
    assert "gsv__ReadFile" not in blocks[1]["text"]  # the model reads the note there, in a text block


def test_a_result_that_could_not_be_saved_says_why() -> None:
    result = {"content": numbered(3_000)}
    fitted = fit_tool_result({"callId": "c1", "result": result}, 20_000, saved_at(result, None, "503 no"), "Read")
    shown = fitted["result"]
    assert "fullOutput" not in shown and shown["truncated"] is True and shown["content"]
    assert "Saving the full output in the agent workspace failed: 503 no." in shown["note"]


def test_an_error_too_large_keeps_its_beginning() -> None:
    error = "boom " * 10_000
    fitted = fit_tool_result({"callId": "c1", "error": error}, 5_000)
    assert encoded_size(fitted) <= 5_000 and set(fitted) == {"callId", "error"}
    assert fitted["error"].endswith(f" [... cut: the error was {len(error)} bytes]")
    assert error.startswith(fitted["error"].split(" [... cut")[0])


def test_with_no_room_at_all_the_answer_is_a_short_error() -> None:
    result = {"content": numbered(3_000)}
    fitted = fit_tool_result({"callId": "c1", "result": result}, ENVELOPE_BYTES + 120, saved_at(result), "Read")
    assert set(fitted) == {"callId", "error"} and "[... cut" in fitted["error"]


@pytest.mark.parametrize("tail", [False, True])
def test_the_saved_copy_is_capped_with_a_marker(tail: bool) -> None:
    text = "é" * 1_000  # two bytes a character: a cut must not split one
    output = full_output({"output" if tail else "content": text}, cap=101)
    assert output.size == 2_000 and output.extension == "txt"
    decoded = output.data.decode()  # still valid UTF-8
    if tail:
        assert decoded.startswith("[orbital: cut here: the output was 2000 bytes; this file keeps its last 100]\n")
        assert decoded.endswith("é" * 50)
    else:
        assert decoded.startswith("é" * 50)
        assert decoded.endswith("\n[orbital: cut here: the output was 2000 bytes; this file keeps its first 100]\n")
    assert full_output({"content": text}).data == text.encode()


# -- the outbox --------------------------------------------------------------------------------------------------


class AnsweringSocket:
    """Stands in for the gateway's socket: records every request and answers it at once."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.sent: list[dict[str, Any]] = []

    async def send(self, message: str | list[str]) -> None:
        frame = json.loads(message if isinstance(message, str) else "".join(message))
        self.sent.append(frame)
        self.agent._on_frame({"type": "res", "id": frame["id"], "ok": True, "payload": {"ok": True}})


def test_the_outbox_drops_a_message_that_can_never_be_sent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        agent = NodeAgent(NodeOptions(url="ws://127.0.0.1:9/ws", node_id="n", workspace=tmp_path, flush_interval=0.01))
        agent._wake = asyncio.Event()
        agent.gateway_limits = {"maxMessageBytes": 4_000}
        socket = AnsweringSocket(agent)
        agent._ws, agent.online = socket, True  # type: ignore[assignment]
        await agent.deliver("tool.result", {"callId": "now", "result": "x" * 5_000})
        assert socket.sent == [] and not agent.outbox  # not sent, not kept
        agent._ws, agent.online = None, False  # offline: both wait
        await agent.deliver("tool.result", {"callId": "later", "result": "x" * 5_000})
        await agent.deliver("tool.result", {"callId": "small", "result": "x"})
        assert [item.params["callId"] for item in agent.outbox] == ["later", "small"]
        agent._ws, agent.online = socket, True  # type: ignore[assignment]
        flusher = asyncio.create_task(agent._flush_loop())
        agent._wake.set()
        deadline = asyncio.get_running_loop().time() + 10
        while agent.outbox:
            assert asyncio.get_running_loop().time() < deadline, "the outbox was never flushed"
            await asyncio.sleep(0.01)
        flusher.cancel()
        assert [frame["params"]["callId"] for frame in socket.sent] == ["small"]

    asyncio.run(main())
    dropped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dropping ")]
    assert [m.split(":")[0] for m in dropped] == [
        "dropping tool.result for call now",
        "dropping tool.result for call later",
    ]
