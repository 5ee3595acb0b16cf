"""The views a run is shown in: `RichView` (a terminal), `PlainView` (pipes, `--plain`), `QuietView` (`--json`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from orbital.cli.chat.driver import RunResult, Sent
from orbital.cli.chat.messages import (
    STAYS_PAUSED,
    ToolCall,
    unshown,
)

if TYPE_CHECKING:
    from rich.console import Console


def _gear(stream: IO[str]) -> str:
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return "⚙" if encoding.startswith("utf") else "*"


def keep_line_breaks(text: str) -> str:
    """Markdown joins consecutive lines into one paragraph; chat text means its line breaks (`/status` is one
    fact a line, a model's list of steps too), so each one outside code fences becomes a hard break."""
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif line.strip() and i + 1 < len(lines) and lines[i + 1].strip() and not line.endswith(("  ", "\\")):
            lines[i] = line + "  "
    return "\n".join(lines)


def _fit(line: str, width: int) -> str:
    line = " ".join(line.split())
    return line if len(line) <= width else line[: max(1, width - 1)] + "…"


def _width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((80, 24)).columns or 80


class QuietView:
    """Shows nothing (`--json`)."""

    def started(self, sent: Sent) -> None:
        pass

    def text(self, piece: str) -> None:
        pass

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        pass

    def tools(self, calls: list[ToolCall]) -> None:
        pass

    def stopping(self, response: str | None) -> None:
        pass

    def paused(self, text: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def resumed(self) -> None:
        pass

    def finished(self, result: RunResult, streamed: str) -> None:
        pass


class PlainView:
    """Raw text to `out` as it arrives; tool lines, notes and errors to `progress`."""

    def __init__(self, out: IO[str], progress: IO[str]) -> None:
        self.out = out
        self.progress = progress
        self._at_line_start = True

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _note(self, line: str) -> None:
        if self.progress is self.out:
            self._end_line()
        else:
            self.out.flush()
        self.progress.write(line + "\n")
        self.progress.flush()

    def _shown(self, streamed: str, full: str) -> None:
        rest = unshown(streamed, full)
        if rest is None:
            self._end_line()
            self._write(full)
        else:
            self._write(rest)

    def started(self, sent: Sent) -> None:
        if sent.result.get("queued"):
            self._note(f"(queued behind the current run, position {sent.result.get('queuePosition', '?')})")

    def text(self, piece: str) -> None:
        self._write(piece)

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        self._shown(streamed, text)
        self._end_line()
        self.tools(calls)

    def tools(self, calls: list[ToolCall]) -> None:
        width = _width(self.progress)
        for c in calls:
            self._note(_fit(f"{_gear(self.progress)} {c.line()}", width))

    def stopping(self, response: str | None) -> None:
        self._note(response or "stopping…")

    def paused(self, text: str) -> None:
        self._end_line()
        for line in text.splitlines():
            self._note(line)

    def note(self, line: str) -> None:
        self._note(line)

    def resumed(self) -> None:
        pass

    def finished(self, result: RunResult, streamed: str) -> None:
        if result.state == "final":
            self._shown(streamed, result.text)
            self._end_line()
        elif result.state == "paused":
            self._end_line()
            self._note(STAYS_PAUSED)
        else:
            self._end_line()
            self._note(f"Error: {result.error}")


class RichView:
    """A spinner until the first text, then the tail of the streamed text in a live area; once a message is
    complete the live area is replaced by the message rendered as markdown, so each text appears once."""

    def __init__(self, console: Console, errors: Console | None = None, *, markdown: bool = True) -> None:
        self.console = console
        self.errors = errors or console
        self.markdown = markdown
        self._live: Any = None
        self._spinner: Any = None
        self._segment = ""

    def _start(self, status: str) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        self._stop()
        self._segment = ""
        self._spinner = Spinner("dots", text=status, style="cyan")
        self._live = Live(
            _Pane(self),
            console=self.console,
            transient=True,
            refresh_per_second=12,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _stop(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def _render_text(self, text: str) -> None:
        if not text.strip():
            return
        if self.markdown:
            from rich.markdown import Markdown

            self.console.print(Markdown(keep_line_breaks(text)))
        else:
            from rich.text import Text

            self.console.print(Text(text))

    def _tool_lines(self, calls: list[ToolCall]) -> None:
        from rich.text import Text

        width = self.console.width
        for c in calls:
            self.console.print(Text(_fit(f"{_gear(self.console.file)} {c.line()}", width), style="dim cyan"))

    def started(self, sent: Sent) -> None:
        if sent.result.get("queued"):
            position = sent.result.get("queuePosition", "?")
            self._start(f"queued behind the current run (position {position})…")
        else:
            self._start("thinking…")

    def text(self, piece: str) -> None:
        self._segment += piece
        if self._live is not None:
            self._live.refresh()

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        self._stop()
        self._render_text(text or streamed)
        self._tool_lines(calls)
        self._start("working…")

    def tools(self, calls: list[ToolCall]) -> None:
        self._stop()
        self._tool_lines(calls)

    def stopping(self, response: str | None) -> None:
        from rich.text import Text

        self.console.print(Text(response or "stopping…", style="yellow"))
        if self._spinner is not None:
            self._spinner.update(text="stopping…")

    def paused(self, text: str) -> None:
        from rich.text import Text

        self._stop()
        self._segment = ""
        first, _, rest = text.partition("\n")
        self.console.print(Text(first, style="bold yellow"))
        if rest:
            self.console.print(Text(rest, style="yellow"))

    def note(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line, style="bold red" if line.startswith("Error:") else "cyan"))

    def resumed(self) -> None:
        self._start("working…")

    def finished(self, result: RunResult, streamed: str) -> None:
        from rich.text import Text

        self._stop()
        if result.state == "paused":
            self.console.print(Text(STAYS_PAUSED, style="yellow"))
            return
        if result.state == "final":
            self._render_text(result.text or streamed)
            if not (result.text or streamed).strip() and not result.tool_calls:
                self.console.print(Text("(the reply has no text)", style="dim"))
        else:
            if streamed.strip():
                self.console.print(Text(streamed))
            cancelled = result.stop_requested and result.cause == "run"
            style = "yellow" if cancelled else "bold red"
            self.errors.print(Text(("⏹ " if cancelled else "Error: ") + str(result.error), style=style))


class _Pane:
    """The live area of `RichView`: the spinner, or the last lines of the text streamed so far."""

    def __init__(self, view: RichView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        from rich.text import Text

        if not self.view._segment:
            yield self.view._spinner
            return
        lines = Text(self.view._segment).wrap(console, max(1, options.max_width))
        keep = max(1, (options.height or console.height) - 2)
        yield Text("\n").join(lines[-keep:])
