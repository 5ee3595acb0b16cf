"""workspace.* RPCs and the shared workspace operations, against moto S3."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.errors import BadRequestError, NotFoundError
from orbital.store import keys, workspace_ops


def _put(services: Any, key: str, text: str) -> None:
    services.workspace.put(key, text.encode(), content_type="text/markdown")


def _content_type(services: Any, key: str) -> str:
    info = services.workspace.head(key)
    assert info is not None
    return str(info.content_type)


def test_write_read_list_delete(rpc: Any, services: Any) -> None:
    written = rpc.call("workspace.write", {"path": "SOUL.md", "content": "be kind"})
    assert written == {"path": "SOUL.md", "size": 7, "written": True, "etag": workspace_ops.version_of(b"be kind")}
    rpc.call("workspace.write", {"path": "memory/2026-01-01.md", "content": "day one"})
    rpc.call("workspace.write", {"path": "memory/deep/x.md", "content": "x"})

    read = rpc.call("workspace.read", {"path": "SOUL.md"})
    assert read["path"] == "SOUL.md"
    assert read["content"] == "be kind"
    assert read["size"] == 7
    assert read["etag"] == written["etag"]
    assert read["lastModified"].endswith("Z") and "T" in read["lastModified"]
    assert "resolvedSource" not in read

    root = rpc.call("workspace.list", {})
    assert root == {"path": "/", "files": ["SOUL.md"], "directories": ["memory/"]}
    memory = rpc.call("workspace.list", {"path": "memory/"})
    assert memory == {"path": "memory/", "files": ["memory/2026-01-01.md"], "directories": ["memory/deep/"]}
    assert rpc.call("workspace.list", {"path": "/memory"})["files"] == ["memory/2026-01-01.md"]
    assert rpc.call("workspace.list", {"path": "nothing-here"}) == {
        "path": "nothing-here",
        "files": [],
        "directories": [],
    }

    assert rpc.call("workspace.delete", {"path": "memory/2026-01-01.md"}) == {
        "path": "memory/2026-01-01.md",
        "deleted": True,
    }
    assert rpc.call("workspace.list", {"path": "memory"})["files"] == []
    assert services.workspace.head(keys.workspace_object("main", "SOUL.md")) is not None


def test_sizes_bytes_for_read_characters_for_write(rpc: Any) -> None:
    text = "héllo ✓"
    assert rpc.call("workspace.write", {"path": "u.txt", "content": text})["size"] == len(text) == 7
    read = rpc.call("workspace.read", {"path": "u.txt"})
    assert read["content"] == text
    assert read["size"] == len(text.encode("utf-8")) == 10


def test_missing_files_and_required_params(rpc: Any) -> None:
    assert rpc.error("workspace.read", {"path": "nope.md"}) == {"code": 404, "message": "File not found: nope.md"}
    assert rpc.error("workspace.delete", {"path": "nope.md"}) == {"code": 404, "message": "File not found: nope.md"}
    assert rpc.error("workspace.read", {}) == {"code": 400, "message": "path is required"}
    assert rpc.error("workspace.read", {"path": ""})["message"] == "path is required"
    assert rpc.error("workspace.write", {"content": "x"}) == {"code": 400, "message": "path is required"}
    assert rpc.error("workspace.write", {"path": "a.md"}) == {"code": 400, "message": "content is required"}
    assert rpc.error("workspace.write", {"path": "a.md", "content": None})["message"] == "content is required"
    assert rpc.error("workspace.delete", {})["message"] == "path is required"
    # an empty file is fine
    assert rpc.call("workspace.write", {"path": "empty.md", "content": ""})["size"] == 0
    assert rpc.call("workspace.read", {"path": "empty.md"})["content"] == ""


@pytest.mark.parametrize("path", ["..", "../agents/other/SOUL.md", "a/../b", "memory/../../x", "a\\..\\b"])
def test_traversal_rejected(rpc: Any, services: Any, path: str) -> None:
    expected = {"code": 400, "message": "Path traversal not allowed"}
    assert rpc.error("workspace.read", {"path": path}) == expected
    assert rpc.error("workspace.write", {"path": path, "content": "x"}) == expected
    assert rpc.error("workspace.delete", {"path": path}) == expected
    assert rpc.error("workspace.list", {"path": path}) == expected
    assert services.workspace.list_all("") == []


def test_agent_id_selection_and_validation(rpc: Any, services: Any) -> None:
    rpc.call("workspace.write", {"path": "a.md", "content": "helper", "agentId": "Helper"})
    assert services.workspace.get(keys.workspace_object("helper", "a.md"))[0] == b"helper"
    assert rpc.call("workspace.read", {"path": "a.md", "agentId": "helper"})["content"] == "helper"
    assert rpc.error("workspace.read", {"path": "a.md"})["code"] == 404

    for bad in ("../main", "a/b", "x..y"):
        assert rpc.error("workspace.write", {"path": "a.md", "content": "x", "agentId": bad}) == {
            "code": 400,
            "message": f"Invalid agentId: {bad}",
        }

    # without agentId the configured default agent is used
    rpc.call("config.set", {"path": "agents.list", "value": [{"id": "other"}, {"id": "helper", "default": True}]})
    assert rpc.call("workspace.read", {"path": "a.md"})["content"] == "helper"


def test_content_types(rpc: Any, services: Any) -> None:
    cases = {
        "n.md": "text/markdown",
        "c.json": "application/json",
        "c.yaml": "text/yaml",
        "c.yml": "text/yaml",
        "s.sh": "text/plain",
    }
    for path, ctype in cases.items():
        rpc.call("workspace.write", {"path": path, "content": "x"})
        assert _content_type(services, keys.workspace_object("main", path)) == ctype


def test_write_refuses_root_and_bare_skills(rpc: Any) -> None:
    assert rpc.error("workspace.write", {"path": "/", "content": "x"}) == {
        "code": 400,
        "message": "path must reference a file",
    }
    assert rpc.error("workspace.write", {"path": "skills", "content": "x"})["message"] == "path must reference a file"


def test_virtual_skills(rpc: Any, services: Any) -> None:
    _put(services, keys.global_skill_object("demo/SKILL.md"), "global demo")
    _put(services, keys.global_skill_object("demo/notes.md"), "global notes")
    _put(services, keys.global_skill_object("other/SKILL.md"), "global other")

    read = rpc.call("workspace.read", {"path": "skills/demo/SKILL.md"})
    assert read["content"] == "global demo"
    assert read["resolvedSource"] == "global"
    assert read["resolvedPath"] == "skills/demo/SKILL.md"

    # a write creates the agent override; the global copy stays as it was
    rpc.call("workspace.write", {"path": "skills/demo/SKILL.md", "content": "agent demo"})
    rpc.call("workspace.write", {"path": "skills/mine/SKILL.md", "content": "agent only"})
    assert services.workspace.get(keys.global_skill_object("demo/SKILL.md"))[0] == b"global demo"
    read = rpc.call("workspace.read", {"path": "skills/demo/SKILL.md"})
    assert (read["content"], read["resolvedSource"], read["resolvedPath"]) == (
        "agent demo",
        "agent",
        "agents/main/skills/demo/SKILL.md",
    )

    listing = rpc.call("workspace.list", {"path": "skills/"})
    assert listing["path"] == "skills/"
    assert listing["files"] == []
    assert listing["directories"] == ["skills/demo/", "skills/mine/", "skills/other/"]
    demo = rpc.call("workspace.list", {"path": "skills/demo"})
    assert demo["files"] == ["skills/demo/SKILL.md", "skills/demo/notes.md"]

    # deleting removes the override only; the global skill shows through again
    rpc.call("workspace.delete", {"path": "skills/demo/SKILL.md"})
    read = rpc.call("workspace.read", {"path": "skills/demo/SKILL.md"})
    assert (read["content"], read["resolvedSource"]) == ("global demo", "global")
    # a global-only skill cannot be deleted from a workspace
    assert rpc.error("workspace.delete", {"path": "skills/other/SKILL.md"}) == {
        "code": 404,
        "message": "File not found: skills/other/SKILL.md",
    }
    assert services.workspace.head(keys.global_skill_object("other/SKILL.md")) is not None


def test_listing_follows_pagination(services: Any, rpc: Any) -> None:
    """S3 answers in pages of two here (a real MaxKeys on every ListObjectsV2 request): every page is read."""
    client = services.workspace.client
    for i in range(7):
        _put(services, keys.workspace_object("main", f"many/f{i}.md"), "x")
    for name in ("d1", "d2", "d3"):
        _put(services, keys.workspace_object("main", f"many/{name}/inner.md"), "x")
    _put(services, keys.global_skill_object("g1/SKILL.md"), "x")
    _put(services, keys.global_skill_object("g2/SKILL.md"), "x")
    _put(services, keys.global_skill_object("g3/SKILL.md"), "x")
    _put(services, keys.workspace_object("main", "skills/a1/SKILL.md"), "x")
    _put(services, keys.workspace_object("main", "skills/g2/SKILL.md"), "x")
    _put(services, keys.workspace_object("main", "skills/a2/SKILL.md"), "x")

    def small_pages(params: dict[str, Any], **_: Any) -> None:
        params["MaxKeys"] = 2

    client.meta.events.register("provide-client-params.s3.ListObjectsV2", small_pages)
    try:
        listing = rpc.call("workspace.list", {"path": "many"})
        skills = rpc.call("workspace.list", {"path": "skills"})
    finally:
        client.meta.events.unregister("provide-client-params.s3.ListObjectsV2", small_pages)
    assert listing["files"] == [f"many/f{i}.md" for i in range(7)]
    assert listing["directories"] == ["many/d1/", "many/d2/", "many/d3/"]
    assert skills["directories"] == ["skills/a1/", "skills/a2/", "skills/g2/", "skills/g1/", "skills/g3/"]


# --- edit (shared operation used by gsv__EditFile) -------------------------------------------------------------


def test_edit_is_literal(services: Any) -> None:
    store = services.workspace
    workspace_ops.write_file(store, "main", "notes.md", "price: TOTAL (tax incl.)")
    out = workspace_ops.edit_file(store, "main", "notes.md", "TOTAL", "$1 and $& and $$ and $`")
    assert out == {
        "path": "notes.md",
        "replacements": 1,
        "edited": True,
        "resolvedSource": "workspace",
        "resolvedPath": "agents/main/notes.md",
    }
    assert workspace_ops.read_file(store, "main", "notes.md")["content"] == "price: $1 and $& and $$ and $` (tax incl.)"
    assert _content_type(services, "agents/main/notes.md") == "text/markdown"


def test_edit_replace_all_and_match_errors(services: Any) -> None:
    store = services.workspace
    workspace_ops.write_file(store, "main", "t.txt", "a-a-a")
    with pytest.raises(BadRequestError) as info:
        workspace_ops.edit_file(store, "main", "t.txt", "a", "b")
    assert info.value.message == (
        "oldString found 3 times in 't.txt'. Use replaceAll: true or provide a more specific oldString."
    )
    with pytest.raises(BadRequestError) as info:
        workspace_ops.edit_file(store, "main", "t.txt", "a", "b", replace_all="true")
    assert "found 3 times" in info.value.message
    out = workspace_ops.edit_file(store, "main", "t.txt", "a", "$&$&", replace_all=True)
    assert out["replacements"] == 3
    assert workspace_ops.read_file(store, "main", "t.txt")["content"] == "$&$&-$&$&-$&$&"
    with pytest.raises(BadRequestError) as info:
        workspace_ops.edit_file(store, "main", "t.txt", "zzz", "y")
    assert info.value.message == "oldString not found in 't.txt'"


def test_edit_validation(services: Any) -> None:
    store = services.workspace
    cases = [
        (("", "a", "b"), "path is required"),
        (("x.md", None, "b"), "oldString is required"),
        (("x.md", "a", None), "newString is required"),
        (("x.md", "", "b"), "oldString must not be empty"),
        (("skills", "a", "b"), "path must reference a file"),
        (("a/../x.md", "a", "b"), "Path traversal not allowed"),
    ]
    for args, message in cases:
        with pytest.raises(BadRequestError) as info:
            workspace_ops.edit_file(store, "main", *args)
        assert info.value.message == message
    with pytest.raises(NotFoundError) as missing:
        workspace_ops.edit_file(store, "main", "x.md", "a", "b")
    assert missing.value.message == "File not found: x.md"


def test_edit_global_skill_writes_agent_override(services: Any) -> None:
    store = services.workspace
    _put(services, keys.global_skill_object("demo/SKILL.md"), "use tool X")
    out = workspace_ops.edit_file(store, "main", "skills/demo/SKILL.md", "tool X", "tool Y")
    assert out["resolvedSource"] == "global"
    assert out["resolvedPath"] == "skills/demo/SKILL.md"
    assert store.get("skills/demo/SKILL.md")[0] == b"use tool X"
    assert store.get("agents/main/skills/demo/SKILL.md")[0] == b"use tool Y"
    again = workspace_ops.edit_file(store, "main", "skills/demo/SKILL.md", "tool Y", "tool Z")
    assert (again["resolvedSource"], again["resolvedPath"]) == ("agent", "agents/main/skills/demo/SKILL.md")
    assert workspace_ops.read_file(store, "main", "skills/demo/SKILL.md")["content"] == "use tool Z"


def test_reads_in_parts_cut_at_character_boundaries(rpc: Any) -> None:
    rpc.call("workspace.write", {"path": "parts.md", "content": "é" * 10})  # 20 bytes, 2 per character
    assert rpc.call("workspace.read", {"path": "parts.md", "limit": 3}) == {
        "path": "parts.md",
        "size": 20,
        "etag": workspace_ops.version_of("é".encode() * 10),  # the whole file's, whatever part was read
        "content": "é",
        "truncated": True,
        "nextOffset": 2,
        "lastModified": rpc.call("workspace.read", {"path": "parts.md"})["lastModified"],
    }
    middle = rpc.call("workspace.read", {"path": "parts.md", "offset": 3, "limit": 4})  # 3 is inside a character
    assert (middle["content"], middle["nextOffset"]) == ("éé", 6)
    tail = rpc.call("workspace.read", {"path": "parts.md", "offset": 18})
    assert tail["content"] == "é" and "truncated" not in tail
    assert rpc.call("workspace.read", {"path": "parts.md", "limit": 1})["content"] == "é"  # never an empty part
    assert rpc.error("workspace.read", {"path": "parts.md", "offset": -1})["code"] == 400
    assert rpc.error("workspace.read", {"path": "parts.md", "limit": 200_000})["code"] == 400


def test_a_listing_too_large_for_one_message_is_cut_short_and_marked(rpc: Any, services: Any) -> None:
    names = [f"big/{i:03d}-" + "n" * 900 + ".md" for i in range(150)]  # 135 KB of names
    for name in names:
        _put(services, keys.workspace_object("main", name), "x")
    listing = rpc.call("workspace.list", {"path": "big"})
    assert listing["truncated"] is True
    assert 50 < len(listing["files"]) < 150 and listing["files"] == names[: len(listing["files"])]
    small = rpc.call("workspace.list", {"path": "/"})
    assert "truncated" not in small and "big/" in small["directories"]


def test_read_file_tool_reads_a_part_of_a_large_file(services: Any) -> None:
    """gsv__ReadFile with offset/limit (bytes), the way to read a saved tool result too large to read at once."""
    from orbital.tools import native

    text = "ab\u00e9" * 40_000  # 4 bytes a round, a two-byte character in each
    services.workspace.put(keys.workspace_object("main", "tool-results/x.txt"), text.encode())
    env = native.ToolEnv(services, {}, "main", "agent:main:main", 0)
    part = native.run_sync(env, "gsv__ReadFile", {"path": "tool-results/x.txt", "offset": 4000, "limit": 11})
    assert part["content"] == "ab\u00e9ab\u00e9ab"  # cut before the character that would not fit
    assert part["truncated"] is True and part["nextOffset"] == 4010 and part["size"] == 160_000
    assert native.run_sync(env, "gsv__ReadFile", {"path": "tool-results/x.txt"})["content"] == text
    for bad in ({"offset": -1}, {"limit": 0}, {"limit": "ten"}, {"offset": True}):
        with pytest.raises(native.ToolError, match="must be a number of bytes"):
            native.run_sync(env, "gsv__ReadFile", {"path": "tool-results/x.txt", **bad})


def test_an_editor_cannot_overwrite_a_change_it_has_not_seen(rpc: Any) -> None:
    first = rpc.call("workspace.write", {"path": "MEMORY.md", "content": "one", "ifNoneMatch": "*"})
    error = rpc.error("workspace.write", {"path": "MEMORY.md", "content": "again", "ifNoneMatch": "*"})
    assert error == {"code": 409, "message": "File already exists: MEMORY.md"}
    seen = rpc.call("workspace.read", {"path": "MEMORY.md"})["etag"]
    assert seen == first["etag"]
    theirs = rpc.call("workspace.write", {"path": "MEMORY.md", "content": "two"})  # someone else, meanwhile
    error = rpc.error("workspace.write", {"path": "MEMORY.md", "content": "mine", "ifMatch": seen})
    assert error == {"code": 409, "message": "File changed since it was read: MEMORY.md"}
    assert rpc.call("workspace.read", {"path": "MEMORY.md"})["content"] == "two"  # nothing was written
    mine = rpc.call("workspace.write", {"path": "MEMORY.md", "content": "mine", "ifMatch": theirs["etag"]})
    assert mine["written"] and rpc.call("workspace.read", {"path": "MEMORY.md"})["etag"] == mine["etag"]
    rpc.call("workspace.delete", {"path": "MEMORY.md"})
    error = rpc.error("workspace.write", {"path": "MEMORY.md", "content": "x", "ifMatch": mine["etag"]})
    assert error == {"code": 409, "message": "File was deleted since it was read: MEMORY.md"}
    assert rpc.error("workspace.write", {"path": "a.md", "content": "x", "ifNoneMatch": "abc"})["code"] == 400


def test_a_skill_override_is_checked_against_the_copy_that_was_read(rpc: Any, services: Any) -> None:
    _put(services, keys.global_skill_object("tidy/SKILL.md"), "global text")
    read = rpc.call("workspace.read", {"path": "skills/tidy/SKILL.md"})
    assert read["resolvedSource"] == "global" and read["etag"] == workspace_ops.version_of(b"global text")
    rpc.call("workspace.write", {"path": "skills/tidy/SKILL.md", "content": "mine", "ifMatch": read["etag"]})
    assert rpc.call("workspace.read", {"path": "skills/tidy/SKILL.md"})["resolvedSource"] == "agent"
