"""Agent workspace operations, shared by the `workspace.*` RPCs and the `gsv__*` file tools (spec §2.6, §8.1).

Every function works on one agent's workspace `agents/{agentId}/` in the bucket and returns the wire-shaped result
dict. Failures raise `RpcError` subclasses whose message is the user-visible text (the RPCs answer with it, the
native tools hand it to the model): 400 for bad input (including path traversal), 404 for missing files.

Paths go through `orbital.domain.workspace_paths.normalize_relative_path`; results echo the path as the caller
wrote it. Virtual `skills/...` paths read the agent's override first and the global `skills/` copy second; writes,
edits and deletes always land on the agent's own copy, so global skills are never modified from a workspace.

Sizes: `read_file` reports the stored object's size in bytes (UTF-8); `write_file` reports `len(content)`, the
number of characters written (GSV reports UTF-16 code units; the two agree for text without astral characters).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.domain.workspace_paths import (
    content_type_for,
    is_virtual_skills_path,
    normalize_relative_path,
    skills_suffix,
)
from orbital.errors import BadRequestError, ConflictError, NotFoundError
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.store.workspace import ObjectInfo, Workspace

SOURCE_WORKSPACE = "workspace"
SOURCE_AGENT = "agent"
SOURCE_GLOBAL = "global"


# --- helpers ------------------------------------------------------------------------------------------------------


def _require_path(path: Any) -> str:
    if not isinstance(path, str) or not path.strip():
        raise BadRequestError("path is required")
    return path


def _file_path(path: str) -> str:
    """The normalized path of something that must be a file (not the root, not the bare `skills` directory)."""
    relative = normalize_relative_path(path)
    if not relative or relative == "skills":
        raise BadRequestError("path must reference a file")
    return relative


def _js_iso(value: str | None) -> str | None:
    """An ISO timestamp in the `2026-01-01T12:00:00.000Z` form JavaScript clients expect."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _decode(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


def _char_start(body: bytes, index: int) -> int:
    """`index`, moved back to the start of the UTF-8 character it falls in (continuation bytes are 0b10xxxxxx)."""
    while 0 < index < len(body) and body[index] & 0xC0 == 0x80:
        index -= 1
    return index


def _candidates(agent_id: str, relative: str) -> list[tuple[str, str]]:
    """Where a file may live, in lookup order: (key, source)."""
    if is_virtual_skills_path(relative) and relative != "skills":
        suffix = skills_suffix(relative)
        return [
            (keys.workspace_object(agent_id, relative), SOURCE_AGENT),
            (keys.global_skill_object(suffix), SOURCE_GLOBAL),
        ]
    return [(keys.workspace_object(agent_id, relative), SOURCE_WORKSPACE)]


def version_of(body: bytes) -> str:
    """A file's version as `workspace.read` gives it (`etag`) and `workspace.write` checks it (`ifMatch`): a hash of
    its whole content, the same on S3 and on files, whichever copy (agent override or global skill) was read."""
    return hashlib.sha256(body).hexdigest()[:32]


def _load(store: Workspace, agent_id: str, relative: str) -> tuple[bytes, ObjectInfo, str] | None:
    """The first existing candidate: (body, info, source)."""
    for key, source in _candidates(agent_id, relative):
        found = store.get(key)
        if found is not None:
            body, info = found
            return body, info, source
    return None


# --- operations ---------------------------------------------------------------------------------------------------


def list_files(store: Workspace, agent_id: str, path: str | None = None) -> dict[str, Any]:
    """One directory level: `{path, files, directories}`, every entry relative to the agent root.

    Files look like `memory/2026-01-01.md`, directories like `memory/`. A virtual `skills/...` directory merges
    the agent's overrides and the global skills (agent entries first, duplicates dropped). Every page of the
    listing is read, however large the directory.
    """
    relative = normalize_relative_path(path)
    shown = path if path else "/"
    if is_virtual_skills_path(relative):
        suffix = skills_suffix(relative)
        sources = [keys.workspace_prefix(agent_id, relative), keys.global_skills_prefix(suffix)]
        files: list[str] = []
        directories: list[str] = []
        for prefix in sources:
            listing = store.listing(prefix)
            for info in listing.keys:
                entry = f"{relative}/{info.key[len(prefix) :]}"
                if not info.key.endswith("/") and entry not in files:
                    files.append(entry)
            for sub in listing.prefixes:
                entry = f"{relative}/{sub[len(prefix) :]}"
                if entry not in directories:
                    directories.append(entry)
        return {"path": shown, "files": files, "directories": directories}

    root = keys.workspace_prefix(agent_id, "")
    listing = store.listing(keys.workspace_prefix(agent_id, relative))
    return {
        "path": shown,
        "files": [info.key[len(root) :] for info in listing.keys if not info.key.endswith("/")],
        "directories": [sub[len(root) :] for sub in listing.prefixes],
    }


def read_file(
    store: Workspace, agent_id: str, path: Any, *, offset: int = 0, limit: int | None = None
) -> dict[str, Any]:
    """`{path, content, size, etag, lastModified?}`; `skills/...` paths add `resolvedPath` (the key read) and
    `resolvedSource` (`agent` or `global`). `size` is the stored object's size in bytes, `etag` the whole file's
    version (`version_of`). With `offset` / `limit`
    (bytes), only that part is returned, cut at a character boundary; when more follows, `truncated: true` and
    `nextOffset` say where to go on."""
    path = _require_path(path)
    relative = normalize_relative_path(path)
    virtual = is_virtual_skills_path(relative) and relative != "skills"
    found = _load(store, agent_id, relative)
    if found is None:
        raise NotFoundError(f"File not found: {path}")
    body, info, source = found
    result: dict[str, Any] = {"path": path, "size": info.size, "etag": version_of(body)}
    if offset or (limit is not None and len(body) > limit):
        start = _char_start(body, min(offset, len(body)))
        end = len(body) if limit is None else _char_start(body, min(start + limit, len(body)))
        if end == start and start < len(body):  # a limit smaller than one character: take the character
            end = start + 1
            while end < len(body) and body[end] & 0xC0 == 0x80:
                end += 1
        result["content"] = _decode(body[start:end])
        if end < len(body):
            result["truncated"] = True
            result["nextOffset"] = end
    else:
        result["content"] = _decode(body)
    modified = _js_iso(info.last_modified)
    if modified is not None:
        result["lastModified"] = modified
    if virtual:
        result["resolvedPath"] = info.key
        result["resolvedSource"] = source
    return result


def _store_text(store: Workspace, agent_id: str, relative: str, content: str) -> str:
    key = keys.workspace_object(agent_id, relative)
    store.put(key, content.encode("utf-8"), content_type=content_type_for(relative))
    return key


def write_file(
    store: Workspace,
    agent_id: str,
    path: Any,
    content: Any,
    *,
    if_match: str | None = None,
    if_none_match: bool = False,
) -> dict[str, Any]:
    """Create or replace a file: `{path, size, written: true, etag}`, where `size` is `len(content)` (characters)
    and `etag` the new version.

    The Content-Type follows the extension (`.md` text/markdown, `.json` application/json, `.yaml`/`.yml`
    text/yaml, otherwise text/plain). A `skills/...` path writes the agent's own override.

    An editor's guard against overwriting a change it has not seen: with `if_match` the file must still be that
    version (`etag` of a read), with `if_none_match` it must not exist; otherwise ConflictError (409) and nothing is
    written. The check and the write are two steps: a write landing between them is not caught (two people editing
    the same file within the same moment)."""
    path = _require_path(path)
    if content is None:
        raise BadRequestError("content is required")
    if not isinstance(content, str):
        raise BadRequestError("content must be a string")
    relative = _file_path(path)
    if if_match is not None or if_none_match:
        current = _load(store, agent_id, relative)
        if if_none_match and current is not None:
            raise ConflictError(f"File already exists: {path}")
        if if_match is not None and (current is None or version_of(current[0]) != if_match):
            state = "was deleted" if current is None else "changed"
            raise ConflictError(f"File {state} since it was read: {path}")
    body = content.encode("utf-8")
    _store_text(store, agent_id, relative, content)
    return {"path": path, "size": len(content), "written": True, "etag": version_of(body)}


def delete_file(store: Workspace, agent_id: str, path: Any) -> dict[str, Any]:
    """Delete one file of the agent's own workspace: `{path, deleted: true}`. For `skills/...` paths only the
    agent's override is removed (the global skill then shows through again)."""
    path = _require_path(path)
    relative = _file_path(path)
    key = keys.workspace_object(agent_id, relative)
    if store.head(key) is None:
        raise NotFoundError(f"File not found: {path}")
    store.delete(key)
    return {"path": path, "deleted": True}


def edit_file(
    store: Workspace,
    agent_id: str,
    path: Any,
    old_string: Any,
    new_string: Any,
    replace_all: Any = False,
) -> dict[str, Any]:
    """Replace exact text in a file: `{path, replacements, edited: true, resolvedSource, resolvedPath}`.

    The replacement is literal: `$&`, `$1` and friends in `new_string` are written as they are. Without
    `replace_all` (only the boolean `True` counts) `old_string` must occur exactly once. `resolvedPath` is the key
    that was read and `resolvedSource` where it came from (`workspace`, or `agent` / `global` for skills); the result
    is always written to the agent's own path.
    """
    if not isinstance(path, str) or not path.strip():
        raise BadRequestError("path is required")
    if not isinstance(old_string, str):
        raise BadRequestError("oldString is required")
    if not isinstance(new_string, str):
        raise BadRequestError("newString is required")
    if old_string == "":
        raise BadRequestError("oldString must not be empty")
    relative = _file_path(path)
    found = _load(store, agent_id, relative)
    if found is None:
        raise NotFoundError(f"File not found: {path}")
    body, info, source = found
    content = _decode(body)
    count = content.count(old_string)
    if count == 0:
        raise BadRequestError(f"oldString not found in '{path}'")
    every = replace_all is True
    if count > 1 and not every:
        raise BadRequestError(
            f"oldString found {count} times in '{path}'. Use replaceAll: true or provide a more specific oldString."
        )
    updated = content.replace(old_string, new_string) if every else content.replace(old_string, new_string, 1)
    _store_text(store, agent_id, relative, updated)
    return {
        "path": path,
        "replacements": count if every else 1,
        "edited": True,
        "resolvedSource": source,
        "resolvedPath": info.key,
    }
