"""The README's `orbital backup`, `orbital export` and `orbital import` examples (in its shell blocks and its prose)
are commands the real `orbital` parser accepts, with the meaning the text gives them: a copied example never ends in
a usage error."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
from orbital.cli.main import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"
SUBCOMMANDS = ("backup", "export", "import")
SHELL_VALUES = {"STACK": "orbital", "TABLE": "orbital-StateTable-X", "BUCKET": "orbital-workspacebucket-x"}
"""What the README's shell variables hold when its commands run."""


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def _commands(text: str) -> list[str]:
    """Every `orbital backup|export|import …` of the README: the lines of its shell blocks (continuations joined) and
    the commands quoted in its prose."""
    found: list[str] = []
    for block in _shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith(".venv/bin/orbital "):
                line = line[len(".venv/bin/") :]
            words = line.split()
            if len(words) > 1 and words[0] == "orbital" and words[1] in SUBCOMMANDS:
                found.append(line)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for quoted in re.findall(r"`(orbital (?:backup|export|import) [^`]+)`", prose.replace("\n", " ")):
        found.append(quoted)
    return found


def _argv(command: str) -> list[str]:
    command = re.sub(r"\$\(date \+%F\)", "2026-11-28", command)
    command = re.sub(r"\$(\w+)", lambda m: SHELL_VALUES[m.group(1)], command)
    words = shlex.split(command, comments=True)
    assert words[0] == "orbital", command
    return words[1:]


class _Refused(Exception):
    pass


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()

    def refuse(message: str) -> None:
        raise _Refused(message)

    for action in parser._actions:  # the subcommands' parsers report through their own `error`
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.error = refuse  # type: ignore[method-assign]
                for inner in sub._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        for leaf in inner.choices.values():
                            leaf.error = refuse  # type: ignore[method-assign]
    parser.error = refuse  # type: ignore[method-assign]
    return parser.parse_args(argv)


COMMANDS = _commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_each_command_it_describes() -> None:
    argvs = [_argv(c) for c in COMMANDS]
    assert any(a[:2] == ["backup", "now"] for a in argvs)
    assert any(a[:2] == ["backup", "list"] for a in argvs)
    assert any(a[:2] == ["backup", "restore"] for a in argvs)
    assert any(a[0] == "export" and "--agent" in a for a in argvs)
    assert any(a[0] == "import" and "--agent" in a and "--replace" in a for a in argvs)
    assert any(a[0] == "export" and "--table" in a for a in argvs)  # the point-in-time restore's way back


@pytest.mark.parametrize("command", COMMANDS, ids=[shlex.join(_argv(c)) for c in COMMANDS])
def test_a_readme_command_parses_with_the_real_cli(command: str) -> None:
    argv = _argv(command)
    try:
        args = _parse(argv)
    except _Refused as exc:
        pytest.fail(f"`{command}`: {exc}")
    assert callable(args.func), command
    if "--agent" in argv:
        assert args.agent == argv[argv.index("--agent") + 1], command
    if "--replace" in argv:
        assert args.replace is True, command
    for flag in ("--stack", "--table", "--bucket", "--data-dir", "--out"):
        if flag in argv:
            assert getattr(args, flag[2:].replace("-", "_")) == argv[argv.index(flag) + 1], command
