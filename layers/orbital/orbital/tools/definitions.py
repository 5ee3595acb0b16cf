"""Definitions of the twelve native `gsv__*` tools, as `tools.list` and the model see them (spec §2.1, §8).

Names, parameter names, types and required fields are part of the protocol; the descriptions are Orbital's own.
The order is the protocol's order and must not change.
"""

from __future__ import annotations

import copy
from typing import Any

NATIVE_PREFIX = "gsv__"


def _obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema.update(extra)
    return schema


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _n(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "number", "description": description, **extra}


def _b(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_SCHEDULE = _obj(
    {
        "kind": _s("How the job is scheduled.", enum=["at", "every", "cron"]),
        "at": _s(
            'kind "at": when to run once. An ISO date-time, a relative phrase such as "in 2 hours", or a '
            '"today"/"tomorrow" form; read in the user\'s timezone when none is given.'
        ),
        "in": _s('kind "at": a relative delay instead of `at`, e.g. "in 30 minutes".'),
        "everyMinutes": _n('kind "every": interval in minutes.'),
        "everyHours": _n('kind "every": interval in hours.'),
        "everyDays": _n('kind "every": interval in days.'),
        "anchor": _s('kind "every": date-time the intervals count from (default: now).'),
        "expr": _s('kind "cron": a five-field cron expression.'),
        "tz": _s('kind "cron": IANA timezone for the expression (default: the user\'s timezone).'),
    },
    ["kind"],
    description="When the job runs. Give `kind` and the fields that belong to it; for `every`, one interval.",
)

_SPEC = _obj(
    {
        "mode": _s(
            "systemEvent: inject `text` into the agent's main session. task: run `message` as a full turn in a "
            "fresh isolated session.",
            enum=["systemEvent", "task"],
        ),
        "text": _s("mode systemEvent: the text to inject."),
        "message": _s("mode task: the instruction for the isolated run."),
        "deliver": _b("mode task: send the final reply to a channel."),
        "channel": _s("mode task: channel to deliver to."),
        "to": _s("mode task: peer id to deliver to."),
        "model": _s("mode task: model override, as provider/model."),
        "thinking": _s("mode task: thinking level override."),
        "timeoutSeconds": _n("mode task: give up on the run after this many seconds."),
        "bestEffortDeliver": _b("mode task: do not fail the run when delivery fails."),
    },
    ["mode"],
    description="What the job does when it runs.",
)

_JOB_FIELDS: dict[str, Any] = {
    "name": _s("Short human-readable name."),
    "schedule": _SCHEDULE,
    "spec": _SPEC,
    "agentId": _s('Agent that owns the job (default "main").'),
    "description": _s("Longer description of what the job is for."),
    "enabled": _b("Whether the job is active (default true)."),
    "deleteAfterRun": _b("Remove a one-shot job after it ran successfully."),
}

_PATH_HINT = 'Relative to the workspace root, e.g. "SOUL.md", "memory/2026-01-15.md" or "skills/summarize/SKILL.md".'

NATIVE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "gsv__ListFiles",
        "description": (
            "List files and directories in the agent's workspace. Directories end with '/'. The virtual skills/ "
            "directory shows your own skill overrides together with the shared skills."
        ),
        "inputSchema": _obj(
            {
                "path": _s(
                    'Directory relative to the workspace root. Omit or use "/" for the root; "memory/" for daily '
                    'notes; "skills/" for skills.'
                )
            }
        ),
    },
    {
        "name": "gsv__ReadFile",
        "description": (
            "Read a file from the agent's workspace. For skills/... paths your own override wins over the shared "
            "copy, and the result says which one was read. For a large file (such as a saved tool result under "
            "tool-results/) read a part: offset and limit in bytes; `nextOffset` in the result says where the rest "
            "starts."
        ),
        "inputSchema": _obj(
            {
                "path": _s(f"File to read. {_PATH_HINT}"),
                "offset": _n("Byte to start at (default 0)."),
                "limit": _n("At most this many bytes (default: the whole file)."),
            },
            ["path"],
        ),
    },
    {
        "name": "gsv__WriteFile",
        "description": (
            "Write or create a file in the agent's workspace. Replaces the whole content; missing directories are "
            "implied. Writing under skills/ creates or updates your own override; shared skills are never "
            "changed."
        ),
        "inputSchema": _obj(
            {"path": _s(f"File to write. {_PATH_HINT}"), "content": _s("The complete new content of the file.")},
            ["path", "content"],
        ),
    },
    {
        "name": "gsv__EditFile",
        "description": (
            "Edit a file by replacing exact text matches. oldString must match exactly once unless replaceAll is "
            "true. The replacement is inserted literally. Prefer this over rewriting a whole file."
        ),
        "inputSchema": _obj(
            {
                "path": _s(f"File to edit. {_PATH_HINT}"),
                "oldString": _s("The exact text to replace (not empty). Include enough context to be unique."),
                "newString": _s("The text to put in its place."),
                "replaceAll": _b("Replace every occurrence instead of requiring a single match (default false)."),
            },
            ["path", "oldString", "newString"],
        ),
    },
    {
        "name": "gsv__DeleteFile",
        "description": (
            "Delete a file from the agent's workspace. The file is gone for good. Under skills/ only your own "
            "override is removed."
        ),
        "inputSchema": _obj({"path": _s(f"File to delete. {_PATH_HINT}")}, ["path"]),
    },
    {
        "name": "gsv__ConfigGet",
        "description": (
            "Inspect the Gateway configuration. All of it, or one value by dotted path. Secrets are masked."
        ),
        "inputSchema": _obj(
            {
                "path": _s(
                    'Dotted path of one value, e.g. "session.dmScope" or "channels.whatsapp.allowFrom". Omit to '
                    "get the whole configuration."
                )
            }
        ),
    },
    {
        "name": "gsv__LogsGet",
        "description": (
            "Fetch recent log lines from a connected node. nodeId may be omitted when exactly one node is connected."
        ),
        "inputSchema": _obj(
            {
                "nodeId": _s("Node to ask. May be omitted when exactly one node is connected."),
                "lines": _n("How many lines to return (default 100, at most 5000)."),
            }
        ),
    },
    {
        "name": "gsv__Cron",
        "description": (
            "Manage scheduled cron jobs. action status: scheduler overview; list: jobs; add: create a job from "
            "`job`; update: apply `patch` to job `id`; remove: delete job `id`; run: run due jobs, or job `id` "
            "now with mode force; runs: past runs, optionally of one `jobId`. Times are read in the user's "
            "timezone."
        ),
        "inputSchema": _obj(
            {
                "action": _s("What to do.", enum=["status", "list", "add", "update", "remove", "run", "runs"]),
                "id": _s('Job id, for "update", "remove" and "run" with mode "force".'),
                "mode": _s(
                    'For "run": "due" runs the jobs that are due, "force" runs job `id` now.', enum=["due", "force"]
                ),
                "agentId": _s('Only jobs of this agent ("list", "status"), or the owner of a new job ("add").'),
                "includeDisabled": _b('For "list": include disabled jobs.'),
                "limit": _n('Page size for "list" and "runs".'),
                "offset": _n('Page offset for "list" and "runs".'),
                "job": _obj(_JOB_FIELDS, ["name", "schedule", "spec"], description='The new job, for "add".'),
                "patch": _obj(
                    copy.deepcopy(_JOB_FIELDS),
                    description='Fields to change, for "update"; same fields as `job`, all optional.',
                ),
                "jobId": _s('For "runs": only runs of this job.'),
            },
            ["action"],
        ),
    },
    {
        "name": "gsv__Message",
        "description": (
            "Send a message to a channel or user. Without channel and to, it goes to the conversation you are "
            "currently in."
        ),
        "inputSchema": _obj(
            {
                "text": _s("The message to send."),
                "channel": _s('Channel to use, e.g. "whatsapp" or "discord" (default: the current one).'),
                "to": _s("Recipient: phone number, user id or channel id (default: the current peer)."),
                "peerKind": _s(
                    'Kind of conversation (default: the current one, else "dm").',
                    enum=["dm", "group", "channel", "thread"],
                ),
                "accountId": _s("Account to send from, for channels with several accounts (default: current)."),
                "replyToId": _s("Id of the message to reply to."),
            },
            ["text"],
        ),
    },
    {
        "name": "gsv__SessionsList",
        "description": (
            "List active sessions with metadata. Most recently active first, optionally with their latest messages."
        ),
        "inputSchema": _obj(
            {
                "limit": _n("How many sessions (default 20, at most 100)."),
                "offset": _n("How many sessions to skip (default 0)."),
                "messageLimit": _n("Recent messages to include per session, 0 to 20 (default 0)."),
            }
        ),
    },
    {
        "name": "gsv__SessionSend",
        "description": (
            "Send a message into another session. It starts a turn there; optionally wait for that turn's reply."
        ),
        "inputSchema": _obj(
            {
                "sessionKey": _s('Target session, e.g. "main" or "agent:helper:main".'),
                "message": _s("The message to deliver."),
                "waitSeconds": _n("Seconds to wait for the reply; 0 returns at once (default 30, at most 120)."),
            },
            ["sessionKey", "message"],
        ),
    },
    {
        "name": "gsv__Transfer",
        "description": (
            "Transfer a file between connected nodes and/or the workspace. Endpoints are {nodeId}:/path/on/node "
            "or gsv:path for a path in the workspace. The tool stays pending until the copy has finished end to "
            "end."
        ),
        "inputSchema": _obj(
            {
                "source": _s('Where to read: "{nodeId}:/path/to/file" or "gsv:path/in/workspace".'),
                "destination": _s("Where to write, in the same form as source."),
            },
            ["source", "destination"],
        ),
    },
]

NATIVE_TOOL_NAMES: tuple[str, ...] = tuple(tool["name"] for tool in NATIVE_TOOLS)


def native_tool_definitions() -> list[dict[str, Any]]:
    """A fresh copy of `NATIVE_TOOLS` that a caller may change freely."""
    return copy.deepcopy(NATIVE_TOOLS)


def is_native_tool(name: str) -> bool:
    return name.startswith(NATIVE_PREFIX)
