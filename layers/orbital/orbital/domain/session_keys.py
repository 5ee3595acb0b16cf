"""Session keys and routing (spec §5.1).

Shapes of a canonical key:

    agent:{agentId}:{mainKey}                                 direct messages, dmScope "main" (the default)
    agent:{agentId}:dm:{peerId}                               dmScope "per-peer"
    agent:{agentId}:{channel}:dm:{peerId}                     dmScope "per-channel-peer"
    agent:{agentId}:{channel}:{accountId}:dm:{peerId}         dmScope "per-account-channel-peer"
    agent:{agentId}:{channel}:{kind}:{peerId}                 groups, channels, threads (any dmScope)

Keys that are not `agent:`-shaped (e.g. `test-session`) are valid names of their own and pass through unchanged,
except `main` / the configured main key, which mean the default agent's main session. Keys such as
`agent:main:cron:{jobId}` are not parseable and also pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orbital.domain import config as cfg
from orbital.domain.ids import DEFAULT_AGENT_ID, normalize_account_id, normalize_agent_id, normalize_e164

DEFAULT_MAIN_KEY = "main"
DM_SCOPES = ("main", "per-peer", "per-channel-peer", "per-account-channel-peer")

_INVALID_TOKEN_CHARS = re.compile(r"[^a-z0-9+\-_@.]+")


def normalize_main_key(raw: str | None) -> str:
    """Trimmed and lowercased; empty means `main`."""
    text = (raw or "").strip()
    return text.lower() if text else DEFAULT_MAIN_KEY


def normalize_token(raw: str | None, fallback: str = "unknown") -> str:
    """A channel name, peer kind or peer id as it appears inside a key: trimmed, lowercased, and every run of
    characters outside `[a-z0-9+-_@.]` replaced by `_` (so a `:` inside a peer id cannot split the key)."""
    text = (raw or "").strip()
    if not text:
        return fallback
    return _INVALID_TOKEN_CHARS.sub("_", text.lower())


def resolve_agent_main_session_key(agent_id: str | None, main_key: str | None = None) -> str:
    """`agent:{agentId}:{mainKey}`, both normalized."""
    return f"agent:{normalize_agent_id(agent_id)}:{normalize_main_key(main_key)}"


def agent_id_from_session_key(session_key: str | None, fallback: str = DEFAULT_AGENT_ID) -> str:
    """The (normalized) agent a key belongs to: the second segment of an `agent:` key, else `fallback`."""
    raw = (session_key or "").strip()
    if not raw.startswith("agent:"):
        return normalize_agent_id(fallback)
    parts = raw.split(":")
    if len(parts) < 2 or not parts[1]:
        return normalize_agent_id(fallback)
    return normalize_agent_id(parts[1])


@dataclass(frozen=True)
class ParsedSessionKey:
    agent_id: str
    peer_kind: str
    peer_id: str
    channel: str | None = None
    account_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The wire-style shape (`agentId`, `channel?`, `accountId?`, `peer{kind,id}`)."""
        out: dict[str, Any] = {"agentId": self.agent_id}
        if self.channel is not None:
            out["channel"] = self.channel
        if self.account_id is not None:
            out["accountId"] = self.account_id
        out["peer"] = {"kind": self.peer_kind, "id": self.peer_id}
        return out


def parse_session_key(raw: str | None) -> ParsedSessionKey | None:
    """Split a structured key into agent, channel, account and peer; None for aliases and short keys.

    A `dm` segment (its first occurrence, when something follows it) marks a direct-message key: what follows is
    the peer id, what precedes it is `[channel[, accountId]]`. Otherwise at least three segments after the agent
    id read as `{channel}:{kind}:{peerId...}`. Segments are returned as written (not normalized).
    """
    text = (raw or "").strip()
    if not text.startswith("agent:"):
        return None
    parts = text.split(":")
    if len(parts) < 4:
        return None
    agent_id = parts[1]
    rest = parts[2:]
    if "dm" in rest:
        dm_at = rest.index("dm")
        if dm_at < len(rest) - 1:
            before = rest[:dm_at]
            return ParsedSessionKey(
                agent_id=agent_id,
                peer_kind="dm",
                peer_id=":".join(rest[dm_at + 1 :]),
                channel=before[0] if len(before) > 0 else None,
                account_id=before[1] if len(before) > 1 else None,
            )
    if len(rest) >= 3:
        return ParsedSessionKey(agent_id=agent_id, peer_kind=rest[1], peer_id=":".join(rest[2:]), channel=rest[0])
    return None


def build_agent_session_key(
    *,
    agent_id: str | None,
    channel: str | None,
    peer_kind: str | None,
    peer_id: str | None,
    account_id: str | None = None,
    dm_scope: str | None = None,
    main_key: str | None = None,
    linked_identity: str | None = None,
) -> str:
    """The canonical key for a conversation (table in the module docstring).

    `linked_identity` (the canonical name from `session.identityLinks`) replaces the peer id — for direct
    messages and for group keys alike. Unknown dmScope values behave like `per-account-channel-peer`.
    """
    agent = normalize_agent_id(agent_id)
    chan = normalize_token(channel)
    kind = normalize_token(peer_kind, "dm")
    peer = normalize_token(linked_identity if linked_identity is not None else peer_id)
    scope = dm_scope or "main"
    if kind != "dm":
        return f"agent:{agent}:{chan}:{kind}:{peer}"
    if scope == "main":
        return resolve_agent_main_session_key(agent, main_key)
    if scope == "per-peer":
        return f"agent:{agent}:dm:{peer}"
    if scope == "per-channel-peer":
        return f"agent:{agent}:{chan}:dm:{peer}"
    return f"agent:{agent}:{chan}:{normalize_account_id(account_id)}:dm:{peer}"


def canonicalize_session_key(
    raw: str | None,
    *,
    main_key: str | None = None,
    dm_scope: str | None = None,
    default_agent_id: str | None = None,
) -> str:
    """The one name a session is stored under, whatever alias a client used.

    * blank → `""`;
    * not `agent:`-shaped: `main` or the main key → the default agent's main session; anything else unchanged;
    * parseable → rebuilt by `build_agent_session_key` (dmScope collapsing, lowercasing, `:` in peer ids → `_`);
    * `agent:{id}:{main|mainKey}` → `agent:{id}:{mainKey}`;
    * anything else (e.g. `agent:main:cron:{jobId}`) unchanged.
    """
    text = (raw or "").strip()
    if not text:
        return text
    mkey = normalize_main_key(main_key)
    if not text.startswith("agent:"):
        if text.lower() in (DEFAULT_MAIN_KEY, mkey):
            return resolve_agent_main_session_key(normalize_agent_id(default_agent_id), main_key)
        return text
    parsed = parse_session_key(text)
    if parsed is not None:
        return build_agent_session_key(
            agent_id=parsed.agent_id,
            channel=parsed.channel if parsed.channel is not None else "unknown",
            account_id=parsed.account_id,
            peer_kind=parsed.peer_kind,
            peer_id=parsed.peer_id,
            dm_scope=dm_scope,
            main_key=main_key,
        )
    parts = text.split(":")
    if len(parts) == 3 and parts[2].lower() in (DEFAULT_MAIN_KEY, mkey):
        agent = agent_id_from_session_key(text, normalize_agent_id(default_agent_id))
        return resolve_agent_main_session_key(agent, main_key)
    return text


def is_main_session_key(session_key: str | None, *, main_key: str | None = None, dm_scope: str | None = None) -> bool:
    """Whether the key names its agent's main session under this dmScope (heartbeat and cron sessions never do)."""
    text = (session_key or "").strip()
    if not text:
        return False
    canonical = canonicalize_session_key(text, main_key=main_key, dm_scope=dm_scope)
    return canonical == resolve_agent_main_session_key(agent_id_from_session_key(text), main_key)


# --- configuration-aware helpers ---------------------------------------------------------------------------------


def _session_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    section = config.get("session")
    return section if isinstance(section, Mapping) else {}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def canonicalize_with_config(raw: str | None, config: Mapping[str, Any]) -> str:
    """`canonicalize_session_key` with `session.mainKey`, `session.dmScope` and the default agent of `config`."""
    section = _session_config(config)
    return canonicalize_session_key(
        raw,
        main_key=_str_or_none(section.get("mainKey")),
        dm_scope=_str_or_none(section.get("dmScope")),
        default_agent_id=cfg.default_agent_id(dict(config)),
    )


def session_agent_id(session_key: str) -> str:
    """The agent whose workspace a session uses: the second segment of an `agent:` key (normalized), else main."""
    return agent_id_from_session_key(session_key, DEFAULT_AGENT_ID)


# --- identity links and bindings ----------------------------------------------------------------------------------


def resolve_linked_identity(identity_links: Any, channel: str | None, sender_id: str | None) -> str | None:
    """The canonical name `session.identityLinks` gives this sender, or None. First match wins.

    An identity `channel:value` matches on that channel (case-insensitive) when the E.164 forms of value and
    sender are equal — or, for ids without digits (whose E.164 form is empty), when the raw ids are equal. An
    identity without `:` is a phone number and matches on any channel when its non-empty E.164 form equals the
    sender's.
    """
    if not isinstance(identity_links, Mapping):
        return None
    sender_raw = (sender_id or "").strip()
    sender = normalize_e164(sender_raw)
    chan = (channel or "").lower()
    for name, identities in identity_links.items():
        if not isinstance(identities, list):
            continue
        for identity in identities:
            if not isinstance(identity, str):
                continue
            if ":" in identity:
                segments = identity.split(":")
                if segments[0].lower() != chan:
                    continue
                value = segments[1]
                wanted = normalize_e164(value)
                if (wanted and wanted == sender) or (not wanted and not sender and value.strip() == sender_raw):
                    return str(name)
                continue
            wanted = normalize_e164(identity)
            if wanted and wanted == sender:
                return str(name)
    return None


def resolve_agent_id_from_binding(
    config: Mapping[str, Any],
    *,
    channel: str | None,
    account_id: str | None = None,
    peer_kind: str | None = None,
    peer_id: str | None = None,
) -> str:
    """The agent for channel traffic: the first `agents.bindings` entry whose given `match` fields (channel,
    accountId, peer.kind, peer.id) all equal the inbound values exactly; else the default agent."""
    agents = config.get("agents")
    bindings = agents.get("bindings") if isinstance(agents, Mapping) else None
    for binding in bindings if isinstance(bindings, list) else []:
        if not isinstance(binding, Mapping):
            continue
        match = binding.get("match")
        match = match if isinstance(match, Mapping) else {}
        if match.get("channel") and match.get("channel") != channel:
            continue
        if match.get("accountId") and match.get("accountId") != account_id:
            continue
        peer = match.get("peer")
        if peer:
            if not isinstance(peer, Mapping) or peer_kind is None or peer_id is None:
                continue
            if peer.get("kind") and peer.get("kind") != peer_kind:
                continue
            if peer.get("id") and peer.get("id") != peer_id:
                continue
        return normalize_agent_id(_str_or_none(binding.get("agentId")))
    return cfg.default_agent_id(dict(config))


BINDING_SPECIFICITY = ("peer", "guildId", "teamId", "accountId", "channel")
"""How specific a binding's match field is, most first (Exoclaw's routing: peer > guild > team > account >
channel)."""


def resolve_agent_by_specificity(
    config: Mapping[str, Any],
    *,
    channel: str,
    account_id: str | None,
    peer_id: str | None,
    guild_id: str | None = None,
    team_id: str | None = None,
) -> str:
    """The agent of a conversation from `agents.bindings`: of the bindings whose given `match` fields (channel,
    accountId, peer.id, guildId, teamId) all equal the conversation's, the most specific one wins (a peer match
    beats a guild match, then team, account, channel; the first in the list among equals); else the default
    agent."""
    agents = config.get("agents")
    bindings = agents.get("bindings") if isinstance(agents, Mapping) else None
    values = {"channel": channel, "accountId": account_id, "guildId": guild_id, "teamId": team_id}
    best: tuple[int, str] | None = None
    for binding in bindings if isinstance(bindings, list) else []:
        if not isinstance(binding, Mapping):
            continue
        match = binding.get("match")
        match = match if isinstance(match, Mapping) else {}
        if any(match.get(name) and match.get(name) != values[name] for name in values):
            continue
        peer = match.get("peer")
        if peer:
            wanted = peer.get("id") if isinstance(peer, Mapping) else None
            if not wanted or wanted != peer_id:
                continue
        given = [name for name in BINDING_SPECIFICITY if match.get(name)]
        rank = BINDING_SPECIFICITY.index(given[0]) if given else len(BINDING_SPECIFICITY)
        if best is None or rank < best[0]:
            best = (rank, normalize_agent_id(_str_or_none(binding.get("agentId"))))
    return best[1] if best is not None else cfg.default_agent_id(dict(config))


def session_key_for_peer(
    config: Mapping[str, Any],
    *,
    agent_id: str,
    channel: str,
    peer_kind: str | None,
    peer_id: str | None,
    account_id: str | None = None,
    sender_id: str | None = None,
) -> str:
    """The session key of inbound channel traffic: identity links are looked up with `sender_id or peer_id`
    (they apply to group keys too), then the key is built with the configured dmScope and main key."""
    section = _session_config(config)
    linked = resolve_linked_identity(section.get("identityLinks"), channel, sender_id or peer_id)
    return build_agent_session_key(
        agent_id=agent_id,
        channel=channel,
        account_id=account_id,
        peer_kind=peer_kind,
        peer_id=peer_id,
        dm_scope=_str_or_none(section.get("dmScope")),
        main_key=_str_or_none(section.get("mainKey")),
        linked_identity=linked,
    )
