"""Skill runtime facts: `node.probe` (kind `bins`) asks a node which executables it has (spec §13.4).

A probe is one item per node (`PROBES#{nodeId}` / probeId) plus an owner pointer by probeId, and moves through

    queued ──dispatch──► sent ──node.probe.result──► (deleted; facts merged into the node's hostBinStatus)
      ▲                   │
      │                   ├─ timeout, attempts < 2 ──► sent again, same probeId
      │                   ├─ timeout, attempts = 2 ──► dropped
      └── node lost ──────┘  (attempts back to 0; re-sent with the same probeId when the node reconnects)

Each dispatch is a deferred call of kind `probe` (call id `{probeId}-{n}`, n counting every send), so the wait
lives in the `deferred_call` state machine and its timeout comes back here. Probes older than
`timeouts.skillProbeMaxAgeMs` are dropped when the node reconnects or facts are refreshed; the next refresh then
queues a probe with a new id.

Only seed-era nodes are probed (their runtime names a `hostRole`; `orbital node` is one). A node of GSV's last
protocol-1 release never answers `node.probe`, so it is never sent one and its bins count as unknown (requirements on
them do not rule it out: `orbital.domain.skills`). A seed-era node whose probe goes unanswered after every attempt
is treated the same way until it answers one or connects again.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from orbital.domain.capabilities import declares_role
from orbital.domain.session_keys import normalize_agent_id
from orbital.domain.skills import BINS_UNANSWERED, probe_bins, skills_entries
from orbital.engines import deferred
from orbital.errors import ConflictError, GatewayFailureError
from orbital.ports import lifecycle
from orbital.protocol.frames import event_frame
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store import skills as skills_store

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection, NodeEntry

log = logging.getLogger("orbital.probes")

CALL_KIND = "probe"
PROBE_KIND = "bins"
QUEUED = "queued"
SENT = "sent"
MAX_ATTEMPTS = 2
DEFAULT_TIMEOUT_MS = 15_000
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 120_000
DEFAULT_MAX_AGE_MS = 600_000
MIN_MAX_AGE_MS = 1_000
MAX_MAX_AGE_MS = 86_400_000
STATUS_FRESH_MS = 5 * 60 * 1000
"""A node's bin status younger than this is trusted: only bins it has never reported are probed."""
ITEM_TTL_SECONDS = MAX_MAX_AGE_MS // 1000 + 3600


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def clamp_timeout(value: Any) -> int:
    """Probe timeout: default 15000 ms, clamped to [1000, 120000]."""
    if not _finite_number(value):
        return DEFAULT_TIMEOUT_MS
    return min(MAX_TIMEOUT_MS, max(MIN_TIMEOUT_MS, math.floor(value)))


def max_age_ms(config: dict[str, Any]) -> int:
    """`timeouts.skillProbeMaxAgeMs`: default 600000, clamped to [1000, 86400000]."""
    value: Any = (config.get("timeouts") or {}).get("skillProbeMaxAgeMs")
    if not _finite_number(value):
        return DEFAULT_MAX_AGE_MS
    return min(MAX_MAX_AGE_MS, max(MIN_MAX_AGE_MS, math.floor(value)))


def agent_ids(config: dict[str, Any]) -> list[str]:
    """`main` and every configured agent, normalized and sorted."""
    ids = {"main"}
    agents = (config.get("agents") or {}).get("list")
    if isinstance(agents, list):
        for entry in agents:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"].strip():
                ids.add(normalize_agent_id(entry["id"]))
    return sorted(ids)


# --- storage ---------------------------------------------------------------------------------------------------------


@dataclass
class Probe:
    probe_id: str
    node_id: str
    agent_id: str
    bins: list[str]
    timeout_ms: int
    created_at: int
    kind: str = PROBE_KIND
    attempts: int = 0
    state: str = QUEUED
    sends: int = 0
    """Every dispatch so far (never reset), so each attempt gets its own call id."""
    sent_at: int | None = None
    expires_at: int | None = None
    call_id: str | None = None
    connection_id: str | None = None
    rev: int = field(default=0, compare=False)
    """Stored revision (0: not stored yet); writes are conditional on it."""

    def to_data(self) -> dict[str, Any]:
        return {
            "probeId": self.probe_id,
            "nodeId": self.node_id,
            "agentId": self.agent_id,
            "kind": self.kind,
            "bins": self.bins,
            "timeoutMs": self.timeout_ms,
            "attempts": self.attempts,
            "createdAt": self.created_at,
            "state": self.state,
            "sends": self.sends,
            "sentAt": self.sent_at,
            "expiresAt": self.expires_at,
            "callId": self.call_id,
            "connectionId": self.connection_id,
        }

    @classmethod
    def from_data(cls, d: dict[str, Any], rev: int) -> Probe:
        return cls(
            probe_id=d["probeId"],
            node_id=d["nodeId"],
            agent_id=d.get("agentId") or "main",
            bins=list(d.get("bins") or []),
            timeout_ms=int(d.get("timeoutMs") or DEFAULT_TIMEOUT_MS),
            created_at=int(d.get("createdAt") or 0),
            kind=d.get("kind") or PROBE_KIND,
            attempts=int(d.get("attempts") or 0),
            state=d.get("state") or QUEUED,
            sends=int(d.get("sends") or 0),
            sent_at=d.get("sentAt"),
            expires_at=d.get("expiresAt"),
            call_id=d.get("callId"),
            connection_id=d.get("connectionId"),
            rev=rev,
        )

    def payload(self) -> dict[str, Any]:
        """The `node.probe` event payload."""
        return {"probeId": self.probe_id, "kind": self.kind, "bins": self.bins, "timeoutMs": self.timeout_ms}


def _ttl(probe: Probe) -> int:
    return probe.created_at // 1000 + ITEM_TTL_SECONDS


def _write(services: Services, probe: Probe) -> Probe | None:
    """Store `probe` unless someone changed it since it was read. Returns the stored version or None."""
    key = keys.probe(probe.node_id, probe.probe_id)
    nxt = replace(probe, rev=probe.rev + 1)
    try:
        if probe.rev == 0:
            services.table.put(
                key, nxt.to_data(), attrs={"rev": nxt.rev}, ttl=_ttl(probe), condition=cond.not_exists("PK")
            )
        else:
            services.table.put(
                key,
                nxt.to_data(),
                attrs={"rev": nxt.rev},
                ttl=_ttl(probe),
                condition=cond.eq("rev", probe.rev),
            )
    except ConflictError:
        return None
    return nxt


def load(services: Services, node_id: str, probe_id: str) -> Probe | None:
    rec = services.table.get(keys.probe(node_id, probe_id))
    return Probe.from_data(rec.data, int(rec.attrs.get("rev", 1))) if rec else None


def node_probes(services: Services, node_id: str) -> list[Probe]:
    recs = services.table.query(keys.probes_pk(node_id))
    probes = [Probe.from_data(r.data, int(r.attrs.get("rev", 1))) for r in recs]
    return sorted(probes, key=lambda p: (p.created_at, p.probe_id))


def owner_of(services: Services, probe_id: str) -> str | None:
    rec = services.table.get(keys.probe_owner(probe_id))
    return rec.data.get("nodeId") if rec else None


def create(services: Services, *, node_id: str, agent_id: str, bins: list[str], timeout_ms: int) -> Probe:
    probe = Probe(
        probe_id=str(uuid.uuid4()),
        node_id=node_id,
        agent_id=agent_id,
        bins=sorted(bins),
        timeout_ms=timeout_ms,
        created_at=services.now_ms(),
    )
    services.table.put(keys.probe_owner(probe.probe_id), {"nodeId": node_id}, ttl=_ttl(probe))
    stored = _write(services, probe)
    assert stored is not None  # a fresh uuid cannot collide
    return stored


def _update(services: Services, node_id: str, probe_id: str, change: Callable[[Probe], Probe | None]) -> Probe | None:
    """Read-modify-write with the revision check, retried on a lost race. `change` returns None for no change."""
    for _ in range(5):
        probe = load(services, node_id, probe_id)
        if probe is None:
            return None
        wanted = change(probe)
        if wanted is None:
            return None
        stored = _write(services, wanted)
        if stored is not None:
            return stored
    log.warning("probe %s kept changing; giving up", probe_id)
    return None


def _release_call(services: Services, call_id: str | None, reason: str) -> None:
    """End the wait of a probe's current dispatch, if it is still pending."""
    if not call_id:
        return
    claimed = deferred.claim(services, call_id)
    if claimed is not None:
        deferred.close_execution(services, claimed[1], error="NodeLost", cause=reason)


def _queued(probe: Probe) -> Probe:
    return replace(probe, state=QUEUED, attempts=0, sent_at=None, expires_at=None, call_id=None, connection_id=None)


def discard(services: Services, probe: Probe, reason: str = "probe dropped") -> None:
    services.table.delete(keys.probe(probe.node_id, probe.probe_id))
    services.table.delete(keys.probe_owner(probe.probe_id))
    _release_call(services, probe.call_id, reason)


# --- dispatch --------------------------------------------------------------------------------------------------------


def dispatch(services: Services, probe: Probe, node: NodeEntry) -> bool:
    """Send a probe to its node: mark it sent (attempts + 1), post `node.probe`, start the wait beside it."""
    now = services.now_ms()
    seq = probe.sends + 1
    call_id = f"{probe.probe_id}-{seq}"
    sent = _write(
        services,
        replace(
            probe,
            state=SENT,
            attempts=probe.attempts + 1,
            sends=seq,
            sent_at=now,
            expires_at=now + probe.timeout_ms,
            call_id=call_id,
            connection_id=node.connection_id,
        ),
    )
    if sent is None:
        return False  # changed meanwhile (answered, dropped or already re-sent)
    call = deferred.PendingCall(
        call_id=call_id,
        kind=CALL_KIND,
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        timeout_ms=probe.timeout_ms,
        created_at=now,
        extra={"probeId": probe.probe_id, "agentId": probe.agent_id},
    )
    deferred.create(services, call)
    if not services.sender.post(node.connection_id, event_frame("node.probe", sent.payload())):
        deferred.claim(services, call_id)
        _write(services, _queued(sent))
        lifecycle.disconnect(services, node.connection_id)
        return False
    try:
        deferred.start_wait(services, call)
    except Exception:
        # the node has the probe and may still answer; without a wait it will not be re-sent on timeout
        deferred.claim(services, call_id)
        log.warning("probe %s sent without a timeout", probe.probe_id)
    return True


# --- refresh ---------------------------------------------------------------------------------------------------------


def _collect_pending(services: Services, node_id: str, now: int, max_age: int) -> set[str]:
    """Bins already asked of a node by live probes; probes past the maximum age are dropped."""
    pending: set[str] = set()
    for probe in node_probes(services, node_id):
        if now - probe.created_at > max_age:
            discard(services, probe, "probe expired")
            continue
        pending.update(probe.bins)
    return pending


def refresh_skill_runtime_facts(
    services: Services,
    agent_id: str,
    *,
    force: bool = False,
    timeout_ms: Any = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Queue and send bin probes for what the agent's skills need and the connected nodes have not reported
    (everything when `force` or when a node's facts are older than 5 minutes). Nodes that cannot run commands are
    skipped. Returns `{updatedNodeCount, skippedNodeIds, errors}`; answers are not awaited."""
    config = config if config is not None else services.config.effective()
    result: dict[str, Any] = {"updatedNodeCount": 0, "skippedNodeIds": [], "errors": []}
    skills = skills_store.list_skills(services.workspace, agent_id)
    required = probe_bins(skills, skills_entries(config))
    if not required:
        return result
    timeout = clamp_timeout(timeout_ms)
    max_age = max_age_ms(config)
    for node in sorted(services.connections.nodes(), key=lambda n: n.node_id):
        runtime = node.runtime
        if not runtime or not declares_role(runtime) or "shell.exec" not in (runtime.get("hostCapabilities") or []):
            result["skippedNodeIds"].append(node.node_id)  # cannot run commands, or never answers (a late node)
            continue
        now = services.now_ms()
        status_raw = runtime.get("hostBinStatus")
        status: dict[str, Any] = status_raw if isinstance(status_raw, dict) else {}
        updated_at: Any = runtime.get("hostBinStatusUpdatedAt")
        fresh = _finite_number(updated_at) and now - updated_at <= STATUS_FRESH_MS
        wanted = [b for b in required if b not in status] if fresh and not force else required
        pending = _collect_pending(services, node.node_id, now, max_age)
        bins = [b for b in wanted if b not in pending]
        if not bins:
            continue
        probe = create(services, node_id=node.node_id, agent_id=agent_id, bins=bins, timeout_ms=timeout)
        result["updatedNodeCount"] += 1
        dispatch(services, probe, node)
    return result


# --- reactions -------------------------------------------------------------------------------------------------------


def on_call_timeout(services: Services, call: deferred.PendingCall) -> None:
    """A dispatch got no answer in time: send the same probe again once, then give up on it."""
    probe = load(services, call.node_id, str(call.extra.get("probeId")))
    if probe is None or probe.state != SENT or probe.call_id != call.call_id:
        return
    if probe.attempts >= MAX_ATTEMPTS:
        services.table.delete(keys.probe(probe.node_id, probe.probe_id))
        services.table.delete(keys.probe_owner(probe.probe_id))
        log.info("probe %s dropped after %d attempts", probe.probe_id, probe.attempts)
        if probe.connection_id:  # its bins stay unknown, never "missing": no skill is ruled out by the silence

            def unanswered(runtime: dict[str, Any]) -> dict[str, Any]:
                runtime[BINS_UNANSWERED] = True
                return runtime

            services.connections.update_node_runtime(probe.node_id, probe.connection_id, unanswered)
        return
    node = services.connections.node(probe.node_id)
    if node is None:
        _write(services, _queued(probe))
        return
    dispatch(services, probe, node)


def on_call_node_lost(services: Services, call: deferred.PendingCall, reason: str) -> None:
    """The node of a pending dispatch went away: the probe waits, queued, for the node to come back."""

    def back_to_queue(probe: Probe) -> Probe | None:
        return _queued(probe) if probe.state == SENT and probe.call_id == call.call_id else None

    _update(services, call.node_id, str(call.extra.get("probeId")), back_to_queue)


def requeue_sent(services: Services, node_id: str, reason: str, *, except_connection: str | None = None) -> None:
    """Every sent probe of a node goes back to queued with attempts 0 (nobody is answered)."""
    for probe in node_probes(services, node_id):
        if probe.state != SENT or (except_connection and probe.connection_id == except_connection):
            continue
        _release_call(services, probe.call_id, reason)

        def back_to_queue(current: Probe, sent_call: str | None = probe.call_id) -> Probe | None:
            return _queued(current) if current.state == SENT and current.call_id == sent_call else None

        _update(services, node_id, probe.probe_id, back_to_queue)


def on_node_gone(services: Services, conn: Connection) -> None:
    if conn.node_id:
        requeue_sent(services, conn.node_id, f"Node disconnected: {conn.node_id}")


def on_node_connected(services: Services, node_id: str, config: dict[str, Any]) -> None:
    """After a node registers: drop probes past the maximum age, re-send the rest (same probeIds), then refresh
    facts for every agent."""
    node = services.connections.node(node_id)
    if node is None:
        return
    requeue_sent(services, node_id, f"Node replaced: {node_id}", except_connection=node.connection_id)
    now = services.now_ms()
    max_age = max_age_ms(config)
    for probe in node_probes(services, node_id):
        if now - probe.created_at > max_age:
            discard(services, probe, "probe expired")
        elif probe.state == QUEUED:
            dispatch(services, probe, node)
    for agent_id in agent_ids(config):
        refresh_skill_runtime_facts(services, agent_id, force=False, config=config)


# --- results ---------------------------------------------------------------------------------------------------------


def accept_result(services: Services, node_id: str, probe_id: str, bins: Any) -> dict[str, Any]:
    """A node's answer: merge the probed bins into its facts and forget the probe. Unknown probes are dropped; a
    probe addressed to another node is refused."""
    owner = owner_of(services, probe_id)
    if owner is None:
        return {"ok": True, "dropped": True}
    if owner != node_id:
        raise GatewayFailureError(f"Node {node_id} is not authorized for probe {probe_id}")
    probe = load(services, node_id, probe_id)
    if probe is None:
        return {"ok": True, "dropped": True}
    entry = services.connections.node(node_id)
    if entry is not None and entry.runtime is not None:
        reported = bins if isinstance(bins, dict) else {}

        def merge(runtime: dict[str, Any]) -> dict[str, Any]:
            status_raw = runtime.get("hostBinStatus")
            status = dict(status_raw) if isinstance(status_raw, dict) else {}
            for name in probe.bins:
                value = reported.get(name)
                status[name] = value if isinstance(value, bool) else False
            runtime["hostBinStatus"] = {k: status[k] for k in sorted(status)}
            runtime["hostBinStatusUpdatedAt"] = services.now_ms()
            runtime.pop(BINS_UNANSWERED, None)
            return runtime

        services.connections.update_node_runtime(node_id, entry.connection_id, merge)
    services.table.delete(keys.probe(node_id, probe_id))
    services.table.delete(keys.probe_owner(probe_id))
    if probe.call_id:
        claimed = deferred.claim(services, probe.call_id)
        if claimed is not None:
            deferred.close_execution(services, claimed[1])
    return {"ok": True}
