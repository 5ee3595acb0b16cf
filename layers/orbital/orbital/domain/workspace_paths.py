"""Workspace paths (spec §8.1, §2.6): what a caller may name inside an agent's workspace, and how it maps to keys.

A workspace path is relative to the agent root `agents/{agentId}/`. `normalize_relative_path` turns what a user
or a model typed into the canonical relative form:

    ""  "/"  "  /  "         -> ""                  (the root)
    "/memory/"               -> "memory"
    "memory//2026-01-01.md"  -> "memory/2026-01-01.md"   (empty and "." segments are dropped)
    "a/../b"  ".."  "a\\..\\b" -> InvalidPathError("Path traversal not allowed")

A `..` segment is refused wherever it appears, with either slash, so a path can never leave the agent root (S3
would not resolve it, but a node or a later reader might). Names that merely contain two dots (`v1..2.md`) are
fine. NUL characters are refused too, and so is a path longer than `MAX_PATH_BYTES` once normalized (an object
key, `agents/{agentId}/` and the path, is at most 1024 bytes on S3 and in the local file workspace alike).

Virtual skills paths: `skills` and `skills/...` name the agent's skill overrides layered over the global
`skills/` tree. Reads look at the agent copy first, then the global one; writes and deletes only ever touch the
agent copy.

Tool results too large for one WebSocket message are saved whole by the node that produced them, one file per call:
`tool-results/{callId}.{ext}` (`tool_result_path`), the only place a node may write in a workspace.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from orbital.domain.session_keys import normalize_agent_id
from orbital.errors import BadRequestError

TRAVERSAL_MESSAGE = "Path traversal not allowed"
MAX_PATH_BYTES = 900
"""The longest workspace path, in bytes of UTF-8: with `agents/` and an agent id (at most 64 characters) in front,
its key stays within the 1024 bytes S3 (and the local file workspace) allow."""
SKILLS_DIR = "skills"

_SEGMENT_SPLIT = re.compile(r"[/\\]")

CONTENT_TYPES = {
    ".md": "text/markdown",
    ".json": "application/json",
    ".yaml": "text/yaml",
    ".yml": "text/yaml",
}
DEFAULT_CONTENT_TYPE = "text/plain"

TOOL_RESULTS_DIR = "tool-results"
TOOL_RESULT_EXTENSIONS = ("txt", "json", "png", "jpg", "gif", "webp")
"""What a saved tool result may be: text (most), JSON (a structured result), an image (a Read of one)."""
_CALL_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_CALL_ID_CHARS = 128


class InvalidPathError(BadRequestError):
    """A workspace path that may not be used (traversal, NUL). A bad request: 400 on the RPC surface."""


def normalize_relative_path(path: str | None) -> str:
    """The canonical relative form of a workspace path ("" for the root). Raises InvalidPathError."""
    text = (path or "").strip()
    if "\x00" in text:
        raise InvalidPathError("Path must not contain NUL characters")
    segments = _SEGMENT_SPLIT.split(text)
    if any(seg.strip() == ".." for seg in segments):
        raise InvalidPathError(TRAVERSAL_MESSAGE)
    # Only "/" separates segments in the stored key; a backslash inside a name is kept as written.
    parts = [seg for seg in text.split("/") if seg not in ("", ".")]
    relative = "/".join(parts)
    size = len(relative.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise InvalidPathError(f"Path too long: at most {MAX_PATH_BYTES} bytes of UTF-8 ({size} given)")
    return relative


def is_virtual_skills_path(relative: str) -> bool:
    """Whether a normalized path lies in the virtual `skills/` tree (the bare `skills` directory included)."""
    return relative == SKILLS_DIR or relative.startswith(SKILLS_DIR + "/")


def skills_suffix(relative: str) -> str:
    """The part of a virtual skills path below `skills/` ("" for `skills` itself)."""
    if relative == SKILLS_DIR:
        return ""
    if relative.startswith(SKILLS_DIR + "/"):
        return relative[len(SKILLS_DIR) + 1 :]
    raise ValueError(f"not a skills path: {relative}")


def content_type_for(path: str) -> str:
    """The Content-Type a file is stored with, chosen by its extension (case-insensitive)."""
    name = path.rsplit("/", 1)[-1].lower()
    for ext, ctype in CONTENT_TYPES.items():
        if name.endswith(ext):
            return ctype
    return DEFAULT_CONTENT_TYPE


def validate_agent_id(raw: Any, default: str) -> str:
    """The agent whose workspace a request addresses.

    Missing or blank -> `default`. Ids that try to name another place in the bucket (containing `/`, `\\`, `..`
    or NUL) are refused with 400 `Invalid agentId: {raw}`; anything else is normalized the way session keys
    normalize agent ids (lowercase, other characters folded to `-`), so the RPCs and the agent loop agree on
    where an agent's workspace lives.
    """
    if raw is None:
        return default
    if not isinstance(raw, str):
        raise BadRequestError("agentId must be a string")
    text = raw.strip()
    if not text:
        return default
    if "/" in text or "\\" in text or ".." in text or "\x00" in text:
        raise BadRequestError(f"Invalid agentId: {raw}")
    return normalize_agent_id(text)


def tool_result_path(call_id: str, extension: str = "txt") -> str:
    """Where the whole result of tool call `call_id` is saved when it does not fit one message:
    `tool-results/{callId}.{extension}`, relative to the agent workspace. Call ids the gateway makes are UUIDs; one a
    client chose (`tool.request`) and that holds anything but letters, digits, `_` and `-`, or is very long, has
    those replaced (and is cut) and gets a hash of the original appended, so two calls never share a file."""
    if extension not in TOOL_RESULT_EXTENSIONS:
        raise ValueError(f"not a tool result extension: {extension}")
    name = _CALL_ID_UNSAFE.sub("_", call_id)[:_CALL_ID_CHARS]
    if name != call_id:
        name = f"{name}-{hashlib.sha256(call_id.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return f"{TOOL_RESULTS_DIR}/{name}.{extension}"


def is_tool_result_path(relative: str, call_id: str) -> bool:
    """Whether a normalized workspace path is where a result of `call_id` is saved (any of the extensions)."""
    return any(relative == tool_result_path(call_id, ext) for ext in TOOL_RESULT_EXTENSIONS)
