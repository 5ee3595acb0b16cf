"""A stdio MCP server for the tests, written with the MCP SDK: `python tests/support/mcp_stdio_server.py`.

Tools: `echo {text}` (text), `picture` (a PNG), `weather {city}` (structured content), `fail {message}` (an `isError`
result), `slow {seconds}`, `big {size}` (that many `x`), `env {name}` (a variable of its environment), `cwd` (its
working directory), `crash` (the process exits mid-call), `grow {name}` (adds a tool `name` that answers "grown" and
sends `notifications/tools/list_changed`).

Environment: `MCP_TEST_STARTS` names a file that gets one line per start (for a test to see restarts); with
`MCP_TEST_REBORN` set, a start after the first adds a tool `reborn`; `MCP_TEST_EXIT_AT_START` set makes the process
exit as soon as it starts (a server that never comes up).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def _starts() -> int:
    path = os.environ.get("MCP_TEST_STARTS")
    if not path:
        return 1
    with Path(path).open("a+", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
        fh.seek(0)
        return len(fh.read().splitlines())


def build(starts: int) -> MCPServer:
    server = MCPServer("orbital-test-stdio")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="A one-pixel PNG.")
    def picture() -> Image:
        return Image(data=PNG, format="png")

    @server.tool(description="The weather in a city, as structured content.")
    def weather(city: str) -> dict[str, object]:
        return {"city": city, "temperature": 21, "sky": "clear"}

    @server.tool(description="Always fails.")
    def fail(message: str = "it failed") -> str:
        raise ToolError(message)

    @server.tool(description="Sleep, then answer.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="A long text.")
    def big(size: int) -> str:
        return "x" * size

    @server.tool(description="A variable of the server's environment.")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The server's working directory.")
    def cwd() -> str:
        return str(Path.cwd())

    @server.tool(description="Exit at once, mid-call.")
    def crash() -> str:
        sys.stdout.flush()
        os._exit(3)

    @server.tool(description="Add a tool and say that the tool list changed.")
    async def grow(name: str, ctx: Context) -> str:
        def grown() -> str:
            return "grown"

        server.add_tool(grown, name=name, description="A tool added at runtime.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    if starts > 1 and os.environ.get("MCP_TEST_REBORN"):

        @server.tool(description="Only after a restart.")
        def reborn() -> str:
            return "born again"

    return server


def main() -> None:
    starts = _starts()
    print(f"test server starting (start {starts})", file=sys.stderr, flush=True)
    if os.environ.get("MCP_TEST_EXIT_AT_START"):
        sys.exit(1)
    build(starts).run("stdio")


if __name__ == "__main__":
    main()
