"""The hand-written part of docs/protocol.md about GSV's last protocol-1 release (`make docs` appends it)."""

from __future__ import annotations

INTRO = """## GSV's last protocol-1 release

GSV's clients kept speaking protocol 1 until GSV's rewrite: the release of 2026-02-20 (the one this reference
otherwise follows, "the seed") and the last protocol-1 release of 2026-03-02 ("the late release"). Clients of both
work against Orbital unchanged. Where the late release changed a behaviour the seed's clients rely on, Orbital keeps
the seed's; what it does for each difference:
"""

DECISIONS: list[tuple[str, str]] = [
    (
        "Nodes send `nodeRuntime` without `hostRole`, `hostOs`, `hostEnv`, `hostBinStatus*`",
        (
            "Accepted. A runtime without `hostRole` is checked the late way: the capability rules only "
            "(`hostCapabilities` known ids, one `toolCapabilities` entry per tool, each a subset), no execution "
            "baseline, every other key ignored. A runtime with `hostRole` is checked as before, baseline included. "
            "A node without a role counts as an `execution` host when its capabilities hold the baseline "
            "(`filesystem.list, filesystem.read, filesystem.write, shell.exec`), else as `specialized` "
            "(`skills.status`, skill `hostRoles`, the prompt)."
        ),
    ),
    (
        "Node probes removed (`node.probe`, `node.probe.result`, `bins`/`env`/`os`/... skill requirements)",
        (
            "Kept for seed-era nodes (a runtime with `hostRole`, as `orbital node` sends). A node without a role is"
            " never sent `node.probe` (`skills.update` lists it in `skippedNodeIds`), and skill requirements on "
            "facts it does not report (`bins`, `anyBins`, `env`, `os`) do not rule it out, as the late release "
            "ignores them. A seed-era node whose probe goes unanswered after both attempts is treated the same way "
            "for `bins`/`anyBins` until it answers a probe or connects again: no skill is ruled out for good by a "
            "silent node. `capabilities`, `anyCapabilities` and `hostRoles` still filter every node. "
            "`timeouts.skillProbeMaxAgeMs` is kept."
        ),
    ),
    (
        "Mode gating: `403 Method {method} not allowed for mode`",
        (
            "Every refusal for a connection's mode reads `Method {method} not allowed for mode {mode}: ` followed "
            "by the seed's sentence where the seed had one (`Only node clients can submit exec events`, `Node not "
            "authorized for this call`, `Not connected`, ...) or `only {modes} connections may call it`. The code "
            "stays the seed's (101 for `tool.invoke` / `logs.get`, else 403), and the check still comes before the "
            "params are read. Clients of either release find the words they look for."
        ),
    ),
    (
        "`node.forget {nodeId, force?}`",
        (
            "Added, client mode only, with the late release's results and errors (above). Orbital keeps each node "
            "it has seen (first seen, last connect and disconnect, `client.platform` and `client.version`, "
            "capabilities, tool names) until it is forgotten; `node.forget` removes it. `orbital node` stops when "
            "it is forgotten with `force` instead of coming back; GSV's late node reconnects after 3 s and is known"
            " again."
        ),
    ),
    (
        "Node registry survives disconnects; offline nodes in `skills.status` and in the prompt",
        (
            "The known nodes are kept (for `node.forget`), but `tools.list`, tool routing, `logs.get`, "
            "`skills.status` and the prompt show connected nodes only, as in the seed: the console and the seed's "
            "clients take every node `skills.status` lists for a connected one. Each listed node now carries "
            "`online: true` (the late CLI prints the flag). `tools.list` keeps the seed's order of node tools (by "
            "connection, not by node id)."
        ),
    ),
    (
        "`hello-ok.features`: `node.forget` added, `node.probe.result` and event `node.probe` removed",
        (
            "`node.forget` is listed; `node.probe.result` and `node.probe` stay (seed-era nodes use them). No "
            "client reads these lists."
        ),
    ),
    (
        (
            "Pending `tool.invoke` / `logs.get` time out with 504; tool calls fail on node disconnect (503 `Node "
            "disconnected: {nodeId}`) and replacement (503 `Node replaced during tool request: {nodeId}`); "
            "`tool.result` checked against the node the call went to"
        ),
        (
            "Orbital already timed calls out and failed them on disconnect; a node's replacement now fails its "
            "pending tool calls with the late text too. Timeouts answer 504 `Tool request timed out after {ms}ms: "
            "{tool}` and `logs.get timed out after {ms}ms (node {nodeId})` (GSV's texts, then the detail). "
            "`logs.get` keeps its own `timeouts.logsMs` (the late release uses `timeouts.toolMs`). `tool.result` "
            "and `logs.result` are accepted from the addressed node only, as before."
        ),
    ),
    (
        (
            "`skills.status` / `skills.update` reshaped (no `requiredBins`, node host facts, `updatedNodeCount`...;"
            " `skills.update` takes only `agentId`)"
        ),
        (
            "The seed's shape is kept, a superset of what the late CLI reads (`nodes[].online`, "
            "`nodes[].hostCapabilities`, `skills[]`); `skills.update` still probes seed-era nodes and honours "
            "`force` / `timeoutMs` when given."
        ),
    ),
    (
        "Messages queued while a run is busy are injected into that run after its next tool results",
        (
            "Not adopted: a queued message runs as its own run with its own `runId` (and `chat.send` says `queued: "
            "true`), which is also what the late CLI needs, as it follows replies by the `runId` it sent."
        ),
    ),
    (
        (
            "`chat` events carry `channelContext` (peer ids and names, to every client); channel replies routed on "
            "the run"
        ),
        (
            "Not adopted: `chat` events carry no `channelContext` (a channel peer's ids stay with the owner's "
            "channel views); Orbital already routes channel replies by the run that started them."
        ),
    ),
    (
        (
            "`gsv__ListFiles` removed; `gsv__ReadFile` lists directories; `workspace.read` misses say `Not found: "
            "{path}`"
        ),
        (
            "The seed's tools and texts are kept: `gsv__ListFiles` lists, `gsv__ReadFile` reads files, a miss is "
            "`404 File not found: {path}`. Prompts and clients of the seed use them."
        ),
    ),
    (
        "`node.exec.event` accepted from node sockets only, with the gating sentence",
        "As above; the late node's events without `callId` are matched through the command's session as before.",
    ),
    (
        (
            "Node CLI: 30 s connect timeout, backoff 3 s to 300 s, keepalive `tools.list` every 240 s, build "
            "versions like `0.0.1+dev.42.abcdef123456`"
        ),
        ("Nothing to change: the keepalive is within the gateway's idle limit, and `client.version` is kept as sent."),
    ),
    (
        "Client CLI matches `chat` events by `runId` and understands `paused`",
        "`chat` events carry the `runId` the client sent; `paused` comes with tool approvals.",
    ),
    (
        ("Transfers: exact-size uploads, persisted state, reused ids, `Source/Destination node disconnected: {node}`"),
        (
            "Orbital's transfers already check sizes and keep their state in the table; ids are not reused, and a "
            "node lost mid-transfer fails it with the seed's `Node disconnected: {nodeId}`."
        ),
    ),
    (
        (
            "Config: `toolApproval` added; `timeouts.skillProbeMaxAgeMs` and most `skills.entries.*.requires` keys "
            "dropped"
        ),
        (
            "`toolApproval` is Orbital's too (tool approvals). The probe setting and every requirement key are kept"
            " for seed-era nodes; for nodes without a role they act as described above."
        ),
    ),
]
"""(what the late release changed, what Orbital does), in the order of the late release's own list."""


def _table() -> str:
    rows = [f"| {change} | {orbital} |" for change, orbital in DECISIONS]
    return "\n".join(["| change in the late release | Orbital |", "|---|---|", *rows]) + "\n"


LATE_RELEASE = INTRO + "\n" + _table()
