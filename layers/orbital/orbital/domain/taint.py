"""Taint (ADR 0041): which tool calls are risky, which tools taint a run, and who may answer an approval. Pure.

A run is tainted when its context holds content that did not come from an owner (`orbital.agent.taint` records
it). While it is, a **risky** call gets `toolApproval.whenTainted` (ask or deny) whatever the rules say:

- shell execution: a node's `Bash`, `Process` when it writes to a process's input or ends it, and any other node tool
  that is not known to only read (a node may offer tools of its own: unknown is risky);
- file writes, edits and deletes: a node's `Write` / `Edit`, the workspace's `gsv__WriteFile`, `gsv__EditFile`,
  `gsv__DeleteFile` (the workspace holds the agent's own prompt files and memory) and `gsv__Transfer` (it always
  writes a file, on a node or in the workspace);
- a message to any conversation other than the run's own (`gsv__Message` naming another channel, peer or account,
  or any `gsv__Message` of a run that has no conversation of its own) and `gsv__SessionSend` (a message into a
  session);
- changes of config, cron or skills (`gsv__Cron` add / update / remove, and any native tool not known to only read);
- any MCP tool (a name with an `mcp` segment: `mcp__{server}__{tool}`, `{nodeId}__mcp__{tool}`), whatever the
  server's `trust` (trust decides only whether its results taint the run, ADR 0045).

Tools matched by `toolApproval.safeTools` are never risky (nor untrusted). A tool without `__` in its name is a tool
of the socket that started the run (a WindieOS client's own): it runs on that device, at that client's request, and
is not risky to the owner's machines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orbital.domain.approval_policy import matches_tool as matches
from orbital.domain.config import DEFAULT_UNTRUSTED_TOOLS, as_dict
from orbital.domain.pairing import normalize_sender

TAINT_RULE = "toolApproval.whenTainted"
"""The `ruleId` of a verdict the taint rule gave (no rule of the policy may take it: the schema refuses it)."""
NATIVE_PREFIX = "gsv__"
SEPARATOR = "__"
REMOTE_MCP_PREFIX = "mcp__"

NATIVE_READ_ONLY = frozenset({"gsv__ListFiles", "gsv__ReadFile", "gsv__ConfigGet", "gsv__LogsGet", "gsv__SessionsList"})
NATIVE_WRITES_FILES = frozenset({"gsv__WriteFile", "gsv__EditFile", "gsv__DeleteFile", "gsv__Transfer"})
CRON_READ_ACTIONS = frozenset({"status", "list", "runs", "run"})
"""`gsv__Cron` actions that change nothing (`run` runs jobs the owner scheduled, as the scheduler would)."""

NODE_READ_ONLY = frozenset({"read", "glob", "grep", "ls", "list", "view", "stat", "find", "search", "cat", "head"})
"""Node tools (by name, any case) known to only read. Every other node tool counts as risky."""
PROCESS_READ_ACTIONS = frozenset({"list", "poll", "log"})

OWNER_KINDS = frozenset({"client", "cli", "system"})
"""Who answers as the owner without being listed: a client authenticated with the gateway's credential (the
console, the CLI, GSV clients) and the gateway itself."""


def matches_any(patterns: Iterable[Any], tool: str) -> bool:
    return any(isinstance(p, str) and matches(p, tool) for p in patterns)


def is_mcp(tool: str) -> bool:
    """Whether the tool is an MCP server's: one of the segments before its own name is `mcp` (any case)."""
    segments = tool.split(SEPARATOR)
    return any(segment.lower() == "mcp" for segment in segments[:-1])


def _patterns(config: Mapping[str, Any], key: str, default: Sequence[str]) -> list[Any]:
    value = as_dict(config.get("toolApproval")).get(key, list(default))
    return value if isinstance(value, list) else list(default)


def safe_tools(config: Mapping[str, Any]) -> list[Any]:
    return _patterns(config, "safeTools", ())


def remote_mcp_server(tool: str) -> str | None:
    """The configured server (`mcp.servers.{name}`) a remote MCP tool `mcp__{server}__{tool}` belongs to, else None
    (a node's `{nodeId}__mcp__…` tools are the node's, not a configured server's)."""
    if not tool.startswith(REMOTE_MCP_PREFIX):
        return None
    server, sep, rest = tool[len(REMOTE_MCP_PREFIX) :].partition(SEPARATOR)
    return server if server and sep and rest else None


def trusted_server(config: Mapping[str, Any], tool: str) -> bool:
    """Whether `tool` is a tool of a remote MCP server configured with `trust: trusted` (its results do not taint)."""
    server = remote_mcp_server(tool)
    if server is None:
        return False
    servers = as_dict(as_dict(config.get("mcp")).get("servers"))
    return as_dict(servers.get(server)).get("trust") == "trusted"


def is_untrusted(config: Mapping[str, Any], tool: str) -> bool:
    """Whether a result of `tool` taints the run: it matches `toolApproval.untrustedTools` (web fetches and MCP
    servers by default) and not `toolApproval.safeTools`, and is not a tool of a remote MCP server the owner marked
    `trust: trusted` (`mcp.servers.{name}.trust`; such a tool stays risky for the gate all the same)."""
    if matches_any(safe_tools(config), tool) or trusted_server(config, tool):
        return False
    return matches_any(_patterns(config, "untrustedTools", DEFAULT_UNTRUSTED_TOOLS), tool)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _same(given: Any, own: Any) -> bool:
    """An argument naming a part of the target: absent means "the current one"; else it must be the run's own."""
    text = _text(given)
    return text is None or text == _text(own)


def _message_elsewhere(args: Mapping[str, Any], own_target: Mapping[str, Any] | None) -> bool:
    if not own_target:
        return True  # the run has no conversation of its own: wherever it goes is someone else's
    peer = as_dict(own_target.get("peer"))
    if not (
        _same(args.get("channel"), own_target.get("channel"))
        and _same(args.get("accountId"), own_target.get("accountId"))
    ):
        return True
    if not _same(args.get("peerKind"), peer.get("kind") or "dm"):
        return True
    to = _text(args.get("to"))
    if to is None:
        return False
    own_peer = _text(peer.get("id"))
    return own_peer is None or (to != own_peer and normalize_sender(to) != normalize_sender(own_peer))


def _native_risky(tool: str, args: Mapping[str, Any], own_target: Mapping[str, Any] | None) -> bool:
    if tool in NATIVE_READ_ONLY:
        return False
    if tool == "gsv__Cron":
        return args.get("action") not in CRON_READ_ACTIONS
    if tool == "gsv__Message":
        return _message_elsewhere(args, own_target)
    return True  # file writes, transfers, session sends, and any native tool not known to only read


def _node_risky(name: str, args: Mapping[str, Any]) -> bool:
    lowered = name.lower()
    if lowered == "process":
        return args.get("action") not in PROCESS_READ_ACTIONS
    return lowered not in NODE_READ_ONLY


def is_risky(tool: str, args: Any, *, own_target: Mapping[str, Any] | None, safe: Iterable[Any] = ()) -> bool:
    """Whether a call of `tool` (the name the model called) with `args` is risky (module docstring). `own_target`
    is the run's conversation (`{channel, accountId, peer}`, None for a run without one); `safe` the patterns of
    `toolApproval.safeTools`."""
    if matches_any(safe, tool):
        return False
    arguments = args if isinstance(args, Mapping) else {}
    if is_mcp(tool):
        return True
    if tool.startswith(NATIVE_PREFIX):
        return _native_risky(tool, arguments, own_target)
    if SEPARATOR not in tool:
        return False  # a tool of the socket that started the run
    return _node_risky(tool.rsplit(SEPARATOR, 1)[1], arguments)


# --- who may answer ---------------------------------------------------------------------------------------------


def identity(channel: Any, sender_id: Any) -> str:
    """A channel sender as `owners` lists it: `{channel}:{senderId}` (the channel in lower case, the sender id in the
    form pairing and allow lists use)."""
    return f"{str(channel or '').strip().lower()}:{normalize_sender(sender_id)}"


def _canonical(value: Any) -> str | None:
    """`{channel}:{senderId}` in canonical form, or None when it is not of that form."""
    if not isinstance(value, str) or ":" not in value:
        return None
    channel, sender = value.split(":", 1)
    if not channel.strip() or not sender.strip():
        return None
    return identity(channel, sender)


def owners(config: Mapping[str, Any]) -> set[str]:
    listed = config.get("owners")
    found = (_canonical(item) for item in (listed if isinstance(listed, list) else []))
    return {item for item in found if item}


def is_owner_sender(config: Mapping[str, Any], channel: Any, sender_id: Any) -> bool:
    """Whether a channel sender is listed in `owners`."""
    return identity(channel, sender_id) in owners(config)


def source_senders(taint: Any) -> set[str]:
    """The identities that tainted a run (`{channel}:{senderId}` of channel senders, `windie:{user}` of guests)."""
    sources = as_dict(taint).get("sources")
    found = set()
    for source in sources if isinstance(sources, list) else []:
        sender = as_dict(source).get("sender")
        canonical = _canonical(sender)
        if canonical:
            found.add(canonical)
    return found


def is_tainted(taint: Any) -> bool:
    sources = as_dict(taint).get("sources")
    return isinstance(sources, list) and bool(sources)


def may_answer(config: Mapping[str, Any], approval: Mapping[str, Any], by: Mapping[str, Any]) -> bool:
    """Whether `by` (`{kind, id, label}`) may approve or deny `approval`: a client authenticated as the owner
    (`kind` client, cli or system), or a channel sender listed in `owners`; never a sender recorded as one of the
    taint sources of the approval's run, and nobody else (a guest, an unlisted channel sender, an unknown kind)."""
    kind = by.get("kind")
    who = _canonical(by.get("id"))
    if who is not None and who in source_senders(approval.get("taint")):
        return False
    if kind in OWNER_KINDS:
        return not by.get("guest")  # a dialect's guest (a WindieOS install) speaks through a client socket
    if kind == "channel":
        return who is not None and who in owners(config)
    return False
