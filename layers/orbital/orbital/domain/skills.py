"""Skills (spec §13): SKILL.md frontmatter, relaxed-JSON metadata, effective policy from `skills.entries`,
eligibility against the connected hosts, the node inventory, and the bins worth probing.

Everything here is pure: callers pass the skill files, the config and the node registry entries.

Frontmatter is a small `key: value` dialect, not YAML:

    ---
    name: github
    description: "GitHub integration"
    metadata:
      { "openclaw": { "requires": { "bins": ["gh"], }, }, }
    ---
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orbital.domain.capabilities import CAPABILITIES, HOST_ROLES, declares_role, effective_role
from orbital.domain.config import get_path, is_missing

SKILL_FILE = "SKILL.md"
REQUIREMENT_FIELDS = ("bins", "anyBins", "env", "config", "os", "hostRoles", "capabilities", "anyCapabilities")
METADATA_NAMESPACES = ("gsv", "openclaw", "clawdbot")
BIN_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
DESCRIPTION_LIMIT = 200

DISABLED_REASON = "disabled by skills.entries policy"
INVALID_REASON = "invalid requirement identifiers"
NO_HOSTS_REASON = "no connected hosts"

# --- frontmatter ---------------------------------------------------------------------------------------------------


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_KEY_LINE = re.compile(r"^([^:\s][^:]*):(.*)$")


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _inline_value(raw: str) -> Any:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in {'"', "'"}:
        return value[1:-1]
    if value == "true":
        return True
    if value == "false":
        return False
    return value


def _is_continuation(line: str) -> bool:
    """Indented or blank lines, and lines that cannot start a key, belong to the block of the key above."""
    return not line.strip() or line[0] in " \t" or _KEY_LINE.match(line) is None


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Split a SKILL.md into (frontmatter fields, body). Without a `---` block the fields are empty and the body is
    the whole text."""
    text = _normalize_newlines(text)
    if not text.startswith("---\n"):
        return {}, text
    lines = text.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return {}, text
    block, body = lines[1:end], "\n".join(lines[end + 1 :])
    fields: dict[str, Any] = {}
    i = 0
    while i < len(block):
        line = block[i]
        i += 1
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        key, raw = match.group(1).strip(), match.group(2)
        if not key:
            continue
        if raw.strip():
            fields[key] = _inline_value(raw)
            continue
        taken: list[str] = []
        while i < len(block) and _is_continuation(block[i]):
            taken.append(block[i].strip())
            i += 1
        fields[key] = "\n".join(taken).strip()
    return fields, body


# --- relaxed JSON ----------------------------------------------------------------------------------------------------


def strip_trailing_commas(text: str) -> str:
    """Remove every `,` (outside strings) followed only by whitespace before a `}` or `]`."""
    out: list[str] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == ",":
            rest = text[i + 1 :].lstrip()
            if rest[:1] in {"}", "]"}:
                continue
        out.append(ch)
    return "".join(out)


def parse_relaxed_json(text: str) -> Any:
    """JSON, or JSON with trailing commas. None when neither parses."""
    for candidate in (text, strip_trailing_commas(text)):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def parse_metadata(value: Any) -> dict[str, dict[str, Any]]:
    """The `metadata` frontmatter value: only object-valued `gsv`, `openclaw` and `clawdbot` members are kept."""
    parsed = parse_relaxed_json(value) if isinstance(value, str) else value
    if not isinstance(parsed, dict):
        return {}
    return {ns: parsed[ns] for ns in METADATA_NAMESPACES if isinstance(parsed.get(ns), dict)}


# --- skill entries ---------------------------------------------------------------------------------------------------


@dataclass
class Skill:
    name: str
    description: str
    location: str
    """The object key of the SKILL.md (`agents/{agentId}/skills/{dir}/SKILL.md` or `skills/{dir}/SKILL.md`)."""
    always: bool = False
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    body: str = ""

    @property
    def dir_name(self) -> str:
        return skill_dir_name(self.location)

    @property
    def manifest(self) -> dict[str, Any]:
        """The first of the `gsv`, `openclaw`, `clawdbot` metadata objects."""
        for ns in METADATA_NAMESPACES:
            if ns in self.metadata:
                return self.metadata[ns]
        return {}


def skill_dir_name(location: str) -> str:
    """The path segment before `/SKILL.md`."""
    parent = location[: -len(SKILL_FILE)].rstrip("/") if location.endswith(SKILL_FILE) else location
    return parent.rsplit("/", 1)[-1]


def first_paragraph(body: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """The first paragraph after leading heading and blank lines, joined with spaces, at most `limit` chars."""
    lines = _normalize_newlines(body).split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
        i += 1
    taken: list[str] = []
    while i < len(lines) and lines[i].strip():
        taken.append(lines[i].strip())
        i += 1
    return " ".join(taken)[:limit]


def parse_skill(location: str, content: str) -> Skill:
    """A skill summary from its SKILL.md."""
    fields, body = parse_frontmatter(content)
    name = fields.get("name")
    description = fields.get("description")
    return Skill(
        name=name if isinstance(name, str) and name else skill_dir_name(location),
        description=description if isinstance(description, str) and description else first_paragraph(body),
        location=location,
        always=fields.get("always") is True,
        metadata=parse_metadata(fields.get("metadata")),
        body=body,
    )


# --- effective policy ----------------------------------------------------------------------------------------------


@dataclass
class SkillPolicy:
    always: bool
    requires: dict[str, list[str]] | None
    """Every requirement list (empty when not required); None when nothing is required or the lists are invalid."""
    invalid: bool = False


def skills_entries(config: Mapping[str, Any]) -> dict[str, Any]:
    skills = config.get("skills")
    entries = skills.get("entries") if isinstance(skills, dict) else None
    return entries if isinstance(entries, dict) else {}


def find_entry(skill: Skill, entries: Mapping[str, Any]) -> dict[str, Any] | None:
    """`skills.entries` looked up by skill name, then directory name, then full location."""
    for key in (skill.name, skill.dir_name, skill.location):
        entry = entries.get(key)
        if isinstance(entry, dict):
            return entry
    return None


def _requirement_list(name: str, raw: Any) -> list[str] | None:
    """The deduplicated, validated list; None when invalid."""
    if not isinstance(raw, list):
        return None
    out: list[str] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            return None
        value = item.strip()
        if name == "os":
            value = value.lower()
        if name == "hostRoles" and value not in HOST_ROLES:
            return None
        if name in {"capabilities", "anyCapabilities"} and value not in CAPABILITIES:
            return None
        if value not in out:
            out.append(value)
    return out


def resolve_policy(skill: Skill, entries: Mapping[str, Any]) -> SkillPolicy | None:
    """The effective policy, or None when `skills.entries` disables the skill. Each requirement field comes from the
    entry's `requires` when present there, else from the skill's metadata manifest."""
    entry = find_entry(skill, entries) or {}
    if entry.get("enabled") is False:
        return None
    always = entry["always"] if isinstance(entry.get("always"), bool) else skill.always
    entry_req = _mapping(entry.get("requires"))
    manifest_req = _mapping(skill.manifest.get("requires"))
    requires: dict[str, list[str]] = {}
    for name in REQUIREMENT_FIELDS:
        if name in entry_req:
            raw = entry_req[name]
        elif name in manifest_req:
            raw = manifest_req[name]
        else:
            raw = []
        values = _requirement_list(name, raw)
        if values is None:
            return SkillPolicy(always=always, requires=None, invalid=True)
        requires[name] = values
    return SkillPolicy(always=always, requires=requires if any(requires.values()) else None)


# --- node inventory --------------------------------------------------------------------------------------------------


BINS_UNANSWERED = "binsUnanswered"
"""On a node's runtime: a bin probe went unanswered after every attempt, so its bins are not known."""


def node_inventory_entry(node_id: str, tools: Iterable[Mapping[str, Any]], runtime: Mapping[str, Any] | None) -> dict:
    """One connected node as eligibility sees it; a node without runtime counts as specialized with nothing.

    `hostFactsKnown`: the node reports its OS and environment (a seed-era runtime, with `hostRole`); `binsKnown`:
    it answers bin probes too. A late node (no `hostRole`) reports neither and never answers a probe: requirements
    on facts it cannot report do not rule it out (GSV's last protocol-1 release ignores those requirements)."""
    rt: Mapping[str, Any] = runtime or {}
    seed_era = declares_role(runtime)
    status_raw = _mapping(rt.get("hostBinStatus"))
    status = {k: status_raw[k] for k in sorted(status_raw) if isinstance(status_raw[k], bool)}
    tool_caps_raw = _mapping(rt.get("toolCapabilities"))
    updated = rt.get("hostBinStatusUpdatedAt")
    return {
        "nodeId": node_id,
        "hostRole": effective_role(runtime),
        "hostCapabilities": sorted(rt.get("hostCapabilities") or []),
        "toolCapabilities": {k: sorted(tool_caps_raw[k] or []) for k in sorted(tool_caps_raw)},
        "tools": sorted(str(t.get("name")) for t in tools if isinstance(t, Mapping) and t.get("name")),
        "hostOs": rt.get("hostOs") if isinstance(rt.get("hostOs"), str) else None,
        "hostEnv": sorted(rt.get("hostEnv") or []),
        "hostBins": sorted(k for k, v in status.items() if v is True),
        "hostBinStatus": status,
        "hostBinStatusUpdatedAt": updated if isinstance(updated, int) and not isinstance(updated, bool) else None,
        "hostFactsKnown": seed_era or runtime is None,
        "binsKnown": (seed_era or runtime is None) and rt.get(BINS_UNANSWERED) is not True,
    }


def build_node_inventory(nodes: Iterable[Any]) -> list[dict[str, Any]]:
    """Inventory of registry entries (objects with `node_id`, `tools`, `runtime`), sorted by node id."""
    entries = [node_inventory_entry(n.node_id, n.tools, n.runtime) for n in nodes]
    return sorted(entries, key=lambda e: e["nodeId"])


def can_probe_bins(inventory_entry: Mapping[str, Any]) -> bool:
    """A node the gateway asks for its bins: a seed-era one (late nodes never answer) that runs commands."""
    return inventory_entry.get("hostFactsKnown", True) is not False and "shell.exec" in (
        inventory_entry.get("hostCapabilities") or []
    )


# --- eligibility -----------------------------------------------------------------------------------------------------


@dataclass
class Eligibility:
    eligible: bool
    hosts: list[str]
    reasons: list[str]


def is_truthy_config(value: Any) -> bool:
    """A config value that satisfies a `requires.config` path."""
    if value is None or is_missing(value):
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list | dict):
        return bool(value)
    return True


def _facts_unknown(host: Mapping[str, Any]) -> bool:
    return host.get("hostFactsKnown", True) is False


def _bins_unknown(host: Mapping[str, Any]) -> bool:
    return host.get("binsKnown", True) is False


_HOST_FILTERS = {
    "hostRoles": lambda host, wanted: host.get("hostRole") in wanted,
    "capabilities": lambda host, wanted: all(c in host["hostCapabilities"] for c in wanted),
    "anyCapabilities": lambda host, wanted: any(c in host["hostCapabilities"] for c in wanted),
    "os": lambda host, wanted: _facts_unknown(host) or (host.get("hostOs") or "").lower() in wanted,
    "env": lambda host, wanted: _facts_unknown(host) or all(e in host["hostEnv"] for e in wanted),
    "bins": lambda host, wanted: _bins_unknown(host) or all(host["hostBinStatus"].get(b) is True for b in wanted),
    "anyBins": lambda host, wanted: _bins_unknown(host) or any(host["hostBinStatus"].get(b) is True for b in wanted),
}


def evaluate_eligibility(
    policy: SkillPolicy, inventory: Sequence[Mapping[str, Any]], config: Mapping[str, Any]
) -> Eligibility:
    """Can a skill run on the connected hosts? Hosts are filtered field by field; every filter that leaves no host
    adds a reason. `requires.config` paths must be set (truthy) in the config root."""
    if policy.always:
        return Eligibility(True, [], [])
    if policy.invalid:
        return Eligibility(False, [], [INVALID_REASON])
    if policy.requires is None:
        return Eligibility(True, [], [])
    if not inventory:
        return Eligibility(False, [], [NO_HOSTS_REASON])
    requires = policy.requires
    candidates = list(inventory)
    reasons: list[str] = []
    for name in ("hostRoles", "capabilities", "anyCapabilities", "os", "env", "bins", "anyBins"):
        wanted = requires.get(name) or []
        if not wanted:
            continue
        test = _HOST_FILTERS[name]
        candidates = [host for host in candidates if test(host, wanted)]
        if not candidates:
            reasons.append(f"requires {name}: {', '.join(wanted)}")
    missing = [path for path in requires.get("config") or [] if not is_truthy_config(get_path(config, path))]
    if missing:
        reasons.append(f"requires config: {', '.join(missing)}")
    hosts = sorted(str(host["nodeId"]) for host in candidates)
    return Eligibility(bool(candidates) and not reasons, hosts, reasons)


# --- bins ------------------------------------------------------------------------------------------------------------


def _policies(skills: Iterable[Skill], entries: Mapping[str, Any]) -> list[tuple[Skill, SkillPolicy]]:
    out = []
    for skill in skills:
        policy = resolve_policy(skill, entries)
        if policy is not None:
            out.append((skill, policy))
    return out


def required_bins(skills: Iterable[Skill], entries: Mapping[str, Any]) -> list[str]:
    """Sorted union of `bins` and `anyBins` of every enabled skill with requirements, as written."""
    found: set[str] = set()
    for _, policy in _policies(skills, entries):
        if policy.requires:
            found.update(policy.requires["bins"], policy.requires["anyBins"])
    return sorted(found)


def probe_bins(skills: Iterable[Skill], entries: Mapping[str, Any]) -> list[str]:
    """The bins worth probing: those of enabled, non-always skills with requirements, limited to safe names."""
    found: set[str] = set()
    for _, policy in _policies(skills, entries):
        if policy.requires and not policy.always:
            found.update(b for b in (*policy.requires["bins"], *policy.requires["anyBins"]) if BIN_NAME.match(b))
    return sorted(found)


# --- skills.status ---------------------------------------------------------------------------------------------------


def status_node(entry: Mapping[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {
        "nodeId": entry["nodeId"],
        "online": True,  # the nodes listed are the connected ones (GSV's late clients print this flag)
        "hostRole": entry["hostRole"],
        "hostCapabilities": list(entry["hostCapabilities"]),
    }
    if entry.get("hostOs"):
        node["hostOs"] = entry["hostOs"]
    node["hostEnv"] = list(entry["hostEnv"])
    node["hostBins"] = list(entry["hostBins"])
    if entry.get("hostBinStatusUpdatedAt") is not None:
        node["hostBinStatusUpdatedAt"] = entry["hostBinStatusUpdatedAt"]
    node["canProbeBins"] = can_probe_bins(entry)
    return node


def status_skill(
    skill: Skill, entries: Mapping[str, Any], inventory: Sequence[Mapping[str, Any]], config: Mapping[str, Any]
) -> dict[str, Any]:
    base = {"name": skill.name, "description": skill.description, "location": skill.location}
    policy = resolve_policy(skill, entries)
    if policy is None:
        return {**base, "always": False, "eligible": False, "eligibleHosts": [], "reasons": [DISABLED_REASON]}
    result = evaluate_eligibility(policy, inventory, config)
    out = {
        **base,
        "always": policy.always,
        "eligible": result.eligible,
        "eligibleHosts": result.hosts,
        "reasons": result.reasons,
    }
    if policy.requires is not None:
        out["requirements"] = {k: list(v) for k, v in policy.requires.items()}
    return out


def build_status(
    agent_id: str,
    now_ms: int,
    skills: Sequence[Skill],
    inventory: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any],
) -> dict[str, Any]:
    """The `skills.status` payload."""
    entries = skills_entries(config)
    rows = [status_skill(skill, entries, inventory, config) for skill in skills]
    return {
        "agentId": agent_id,
        "refreshedAt": now_ms,
        "requiredBins": required_bins(skills, entries),
        "nodes": [status_node(e) for e in sorted(inventory, key=lambda e: e["nodeId"])],
        "skills": sorted(rows, key=lambda r: (r["name"], r["location"])),
    }


# --- prompt selection (§13.3 filters) --------------------------------------------------------------------------------


@dataclass
class PromptSkills:
    visible: list[tuple[Skill, SkillPolicy]]
    hidden_by_config: int = 0
    hidden_invalid: int = 0
    hidden_runtime: int = 0


def prompt_read_path(location: str, agent_id: str) -> str | None:
    """The workspace path a model reads a skill through (`skills/{dir}/SKILL.md`), or None for other locations."""
    agent_prefix = f"agents/{agent_id}/skills/"
    if location.startswith(agent_prefix):
        return location[len("agents/" + agent_id + "/") :]
    if location.startswith("skills/"):
        return location
    return None


def select_prompt_skills(
    skills: Sequence[Skill],
    agent_id: str,
    config: Mapping[str, Any],
    inventory: Sequence[Mapping[str, Any]],
) -> PromptSkills:
    """The skills a prompt lists, with how many each filter hid (config policy, invalid requirements, runtime)."""
    entries = skills_entries(config)
    out = PromptSkills(visible=[])
    for skill in skills:
        if prompt_read_path(skill.location, agent_id) is None:
            continue
        policy = resolve_policy(skill, entries)
        if policy is None:
            out.hidden_by_config += 1
            continue
        if policy.invalid and not policy.always:
            out.hidden_invalid += 1
            continue
        if not evaluate_eligibility(policy, inventory, config).eligible:
            out.hidden_runtime += 1
            continue
        out.visible.append((skill, policy))
    return out
