"""Node file tools (Read, Write, Edit, Glob, Grep), tool definitions and the nodeRuntime sent in connect."""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from orbital.domain.capabilities import validate_node_runtime
from orbital.node import tools as tools_module
from orbital.node.runtime import host_os, node_runtime
from orbital.node.tools import TOOL_NAMES, NodeToolError, NodeTools, expand_braces


@pytest.fixture
def tools(tmp_path: Path) -> NodeTools:
    return NodeTools(tmp_path)


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


# -- definitions and runtime -----------------------------------------------------------------------------------


def test_seven_tools_with_object_schemas(tools: NodeTools) -> None:
    defs = tools.definitions()
    assert [d["name"] for d in defs] == ["Bash", "Process", "Read", "Write", "Edit", "Glob", "Grep"]
    required = {d["name"]: d["inputSchema"]["required"] for d in defs}
    assert required == {
        "Bash": ["command"],
        "Process": ["action"],
        "Read": ["path"],
        "Write": ["path", "content"],
        "Edit": ["path", "oldString", "newString"],
        "Glob": ["pattern"],
        "Grep": ["pattern"],
    }
    for d in defs:
        schema = d["inputSchema"]
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
        assert d["description"]
    assert set(defs[0]["inputSchema"]["properties"]) == {"command", "workdir", "timeout", "background", "yieldMs"}
    assert set(defs[1]["inputSchema"]["properties"]) == {"action", "sessionId", "data", "offset", "limit"}
    assert set(defs[4]["inputSchema"]["properties"]) == {"path", "oldString", "newString", "replaceAll"}
    assert set(defs[6]["inputSchema"]["properties"]) == {"pattern", "path", "include"}


def test_node_runtime_passes_gateway_validation() -> None:
    runtime = node_runtime(TOOL_NAMES, environ={"HOME": "/home/x", "PATH": "/bin", "ZED": "1", "A_VAR": "2"})
    normalized = validate_node_runtime("node-test", runtime, TOOL_NAMES)
    assert runtime["hostRole"] == "execution"
    assert runtime["hostCapabilities"] == sorted(
        ["filesystem.list", "filesystem.read", "filesystem.write", "filesystem.edit", "text.search", "shell.exec"]
    )
    assert runtime["toolCapabilities"] == {
        "Bash": ["shell.exec"],
        "Process": ["shell.exec"],
        "Read": ["filesystem.read"],
        "Write": ["filesystem.write"],
        "Edit": ["filesystem.edit", "filesystem.read", "filesystem.write"],
        "Glob": ["filesystem.list"],
        "Grep": ["filesystem.read", "text.search"],
    }
    assert runtime["hostEnv"] == ["A_VAR", "HOME", "PATH", "ZED"]
    assert "hostBinStatus" not in runtime
    assert normalized["hostCapabilities"] == runtime["hostCapabilities"]
    assert normalized["toolCapabilities"] == runtime["toolCapabilities"]
    assert normalized["hostEnv"] == runtime["hostEnv"]


def test_node_runtime_carries_env_names_never_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_NODE_TEST_SECRET", "s3cr3t-value-123")
    monkeypatch.setenv("ORBITAL_TOKEN", "tok")
    runtime = node_runtime(TOOL_NAMES)
    assert "ORBITAL_TOKEN" not in runtime["hostEnv"]
    assert "ORBITAL_NODE_TEST_SECRET" in runtime["hostEnv"]
    assert "s3cr3t-value-123" not in json.dumps(runtime)
    assert runtime["hostEnv"] == sorted(set(runtime["hostEnv"]))
    validate_node_runtime("node-test", runtime, TOOL_NAMES)


def test_host_os_names() -> None:
    assert host_os("linux") == "linux"
    assert host_os("darwin") == "macos"
    assert host_os("win32") == "windows"
    assert host_os("freebsd14") == "freebsd"


def test_unknown_tool(tools: NodeTools) -> None:
    with pytest.raises(NodeToolError, match=r"^Tool not found: Nope$"):
        tools.execute("Nope", {})


# -- Read ------------------------------------------------------------------------------------------------------


def test_read_numbers_lines(tools: NodeTools, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    result = tools.execute("Read", {"path": "a.txt"})
    assert result == {
        "path": str(tmp_path / "a.txt"),
        "content": "     1\tone\n     2\ttwo\n     3\tthree",
        "lines": 3,
    }


def test_read_offset_and_limit(tools: NodeTools, tmp_path: Path) -> None:
    path = tmp_path / "ten.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = tools.execute("Read", {"path": str(path), "offset": 2, "limit": 3})
    assert result["lines"] == 3
    assert result["content"].split("\n") == ["     3\tline 3", "     4\tline 4", "     5\tline 5"]
    tail = tools.execute("Read", {"path": str(path), "offset": 8})
    assert tail["content"] == "     9\tline 9\n    10\tline 10"


def test_read_missing_file(tools: NodeTools, tmp_path: Path) -> None:
    with pytest.raises(NodeToolError, match=r"^Failed to read '.*nope\.txt': No such file or directory$"):
        tools.execute("Read", {"path": "nope.txt"})


def test_read_image_is_structured(tools: NodeTools, tmp_path: Path) -> None:
    png = tiny_png()
    (tmp_path / "dot.png").write_bytes(png)
    result = tools.execute("Read", {"path": "dot.png"})
    text, image = result["content"]
    assert text == {"type": "text", "text": f"Read image file {tmp_path / 'dot.png'} [image/png, {len(png)} bytes]"}
    assert image["type"] == "image"
    assert image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]) == png


def test_read_binary_is_an_error(tools: NodeTools, tmp_path: Path) -> None:
    (tmp_path / "a.zip").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 8)
    with pytest.raises(NodeToolError, match=r"^Binary file \(application/zip, 2\.0 KB\) - not a text file$"):
        tools.execute("Read", {"path": "a.zip"})
    (tmp_path / "blob").write_bytes(b"\xff\xfe\xfa" * 10)
    with pytest.raises(NodeToolError, match=r"^Binary file \(unknown type, 30 bytes\) - not a text file$"):
        tools.execute("Read", {"path": "blob"})


# -- Write / Edit ------------------------------------------------------------------------------------------------


def test_write_counts_bytes_and_creates_parents(tools: NodeTools, tmp_path: Path) -> None:
    result = tools.execute("Write", {"path": "deep/er/out.txt", "content": "test content\nline 2"})
    target = tmp_path / "deep" / "er" / "out.txt"
    assert result == {"path": str(target), "bytes": 19}
    assert target.read_text() == "test content\nline 2"
    assert tools.execute("Write", {"path": str(target), "content": "héllo"})["bytes"] == 6


def test_write_requires_content(tools: NodeTools) -> None:
    with pytest.raises(NodeToolError, match=r"^content is required$"):
        tools.execute("Write", {"path": "x.txt"})


def test_edit_replaces_once(tools: NodeTools, tmp_path: Path) -> None:
    path = tmp_path / "greet.txt"
    path.write_text("hello world\n")
    assert tools.execute("Edit", {"path": "greet.txt", "oldString": "hello", "newString": "goodbye"}) == {
        "path": str(path),
        "replacements": 1,
    }
    assert path.read_text() == "goodbye world\n"


def test_edit_replace_all_and_ambiguity(tools: NodeTools, tmp_path: Path) -> None:
    path = tmp_path / "many.txt"
    path.write_text("a-a-a")
    with pytest.raises(NodeToolError) as info:
        tools.execute("Edit", {"path": str(path), "oldString": "a", "newString": "b"})
    assert str(info.value) == (
        f"oldString found 3 times in '{path}'. Use replaceAll: true or provide more context to make it unique."
    )
    assert path.read_text() == "a-a-a"
    result = tools.execute("Edit", {"path": str(path), "oldString": "a", "newString": "b", "replaceAll": True})
    assert result["replacements"] == 3
    assert path.read_text() == "b-b-b"


def test_edit_not_found(tools: NodeTools, tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("abc")
    with pytest.raises(NodeToolError) as info:
        tools.execute("Edit", {"path": str(path), "oldString": "zzz", "newString": "y"})
    assert str(info.value) == f"oldString not found in '{path}'"


def test_edit_is_literal(tools: NodeTools, tmp_path: Path) -> None:
    path = tmp_path / "re.txt"
    path.write_text("name = foo(bar)\n")
    tools.execute("Edit", {"path": str(path), "oldString": "foo(bar)", "newString": r"$1 \1 $& $$"})
    assert path.read_text() == "name = $1 \\1 $& $$\n"


# -- Glob --------------------------------------------------------------------------------------------------------


def _touch(path: Path, mtime: int, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def test_glob_newest_first_absolute(tools: NodeTools, tmp_path: Path) -> None:
    old = _touch(tmp_path / "src" / "old.py", 1_000_000)
    new = _touch(tmp_path / "src" / "pkg" / "new.py", 3_000_000)
    mid = _touch(tmp_path / "mid.py", 2_000_000)
    _touch(tmp_path / "notes.md", 4_000_000)
    result = tools.execute("Glob", {"pattern": "**/*.py"})
    assert result == {
        "pattern": "**/*.py",
        "basePath": str(tmp_path),
        "matches": [str(new), str(mid), str(old)],
        "count": 3,
    }
    scoped = tools.execute("Glob", {"pattern": "*.py", "path": "src"})
    assert scoped["matches"] == [str(old)]
    both = tools.execute("Glob", {"pattern": "*.{py,md}"})
    assert both["matches"] == [str(tmp_path / "notes.md"), str(mid)]


def test_glob_two_matches_and_cap(tools: NodeTools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        _touch(tmp_path / f"f{i}.txt", 1_000_000 + i)
    monkeypatch.setattr(tools_module, "GLOB_MAX_RESULTS", 2)
    result = tools.execute("Glob", {"pattern": "*.txt"})
    assert result["matches"] == [str(tmp_path / "f4.txt"), str(tmp_path / "f3.txt")]
    assert result["count"] == 2
    assert result["truncated"] is True


def test_glob_missing_directory(tools: NodeTools) -> None:
    with pytest.raises(NodeToolError, match=r"^Directory not found: "):
        tools.execute("Glob", {"pattern": "*", "path": "missing"})


def test_expand_braces() -> None:
    assert expand_braces("*.{ts,tsx}") == ["*.ts", "*.tsx"]
    assert expand_braces("{a,b}/{c,d}") == ["a/c", "a/d", "b/c", "b/d"]
    assert expand_braces("plain*") == ["plain*"]
    assert expand_braces("{unbalanced") == ["{unbalanced"]


# -- Grep --------------------------------------------------------------------------------------------------------


def test_grep_matches_in_two_files(tools: NodeTools, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\nTODO: first\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("nothing\nstill nothing\nTODO second\n")
    (tmp_path / "c.txt").write_text("no match here\n")
    (tmp_path / "bin.dat").write_bytes(b"TODO \xff\xfe not utf-8\n")
    result = tools.execute("Grep", {"pattern": r"TODO:?\s"})
    assert result == {
        "pattern": r"TODO:?\s",
        "basePath": str(tmp_path),
        "matches": [
            {"path": str(tmp_path / "a.py"), "line": 2, "content": "TODO: first"},
            {"path": str(tmp_path / "sub" / "b.txt"), "line": 3, "content": "TODO second"},
        ],
        "count": 2,
    }
    only_py = tools.execute("Grep", {"pattern": "TODO", "include": "*.py"})
    assert [m["path"] for m in only_py["matches"]] == [str(tmp_path / "a.py")]


def test_grep_truncates_at_100_and_long_lines(tools: NodeTools, tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"hit {i} " + "x" * 300 + "\n" for i in range(150)))
    result = tools.execute("Grep", {"pattern": "^hit", "path": "big.txt"})
    assert result["truncated"] is True
    assert "count" not in result
    assert len(result["matches"]) == 100
    assert result["matches"][99]["line"] == 100
    assert all(len(m["content"]) == 200 for m in result["matches"])


def test_grep_skips_huge_files(tools: NodeTools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools_module, "GREP_MAX_FILE_BYTES", 100)
    (tmp_path / "small.txt").write_text("needle\n")
    (tmp_path / "large.txt").write_text("needle\n" + "y" * 200)
    result = tools.execute("Grep", {"pattern": "needle"})
    assert [m["path"] for m in result["matches"]] == [str(tmp_path / "small.txt")]


def test_grep_bad_regex(tools: NodeTools) -> None:
    with pytest.raises(NodeToolError, match=r"^Invalid regex pattern: "):
        tools.execute("Grep", {"pattern": "("})
