"""Skills (spec §13.5, §13.4): skills.status, skills.update, node.probe.result, and the probe lifecycle hooks
(node connect, node loss, probe timeouts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.domain.session_keys import normalize_agent_id
from orbital.domain.skills import build_node_inventory, build_status
from orbital.engines import probes
from orbital.errors import BadRequestError
from orbital.protocol.params import Count, Flag, GivenObject, Text
from orbital.protocol.registry import CLIENT, NODE, Params, Result, Router
from orbital.store import skills as skills_store

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("skills")


class SkillsStatusParams(Params):
    agentId: Text = None


class SkillsUpdateParams(Params):
    agentId: Text = None
    force: Flag = None
    timeoutMs: Count = None


class NodeFacts(Result):
    nodeId: str
    online: bool
    """Always true: the nodes listed are the connected ones (a late GSV client prints the flag)."""
    hostRole: str | None
    """The role the node declares; for a node that declares none (GSV's last protocol-1 release), `execution`
    when its capabilities hold the execution baseline, else `specialized`."""
    hostCapabilities: list[str]
    hostOs: str | None = None
    hostEnv: list[str]
    hostBins: list[str]
    hostBinStatusUpdatedAt: int | None = None
    canProbeBins: bool


class SkillRow(Result):
    name: str
    description: str
    location: str
    always: bool
    eligible: bool
    eligibleHosts: list[str]
    reasons: list[str]
    requirements: dict[str, list[str]] | None = None


class SkillsStatusResult(Result):
    agentId: str
    refreshedAt: int
    requiredBins: list[str]
    nodes: list[NodeFacts]
    skills: list[SkillRow]


class SkillsUpdateResult(SkillsStatusResult):
    updatedNodeCount: int
    skippedNodeIds: list[str]
    errors: list[Any]


class ProbeResultParams(Params):
    probeId: Text = None
    ok: Flag = None
    bins: GivenObject = None
    """Bin name -> found; checked entry by entry."""
    error: Text = None


class ProbeAck(Result):
    ok: bool
    dropped: bool | None = None


def _agent_id(raw: str | None) -> str:
    return normalize_agent_id(raw.strip() if raw is not None else None)


def _status(ctx: CallContext, agent_id: str) -> dict[str, Any]:
    services = ctx.services
    skills = skills_store.list_skills(services.workspace, agent_id)
    inventory = build_node_inventory(services.connections.nodes())
    return build_status(agent_id, ctx.now_ms(), skills, inventory, ctx.config())


@router.method("skills.status", params=SkillsStatusParams, result=SkillsStatusResult, modes=CLIENT, scope=roles.READ)
def skills_status(ctx: CallContext, params: SkillsStatusParams) -> dict[str, Any]:
    """Every skill of an agent (default `main`) with its eligibility on the connected hosts, the hosts' facts and
    the bins the skills need."""
    return _status(ctx, _agent_id(params.agentId))


@router.method("skills.update", params=SkillsUpdateParams, result=SkillsUpdateResult, modes=CLIENT, scope=roles.OPERATE)
def skills_update(ctx: CallContext, params: SkillsUpdateParams) -> dict[str, Any]:
    """Probe the connected hosts for the bins an agent's skills need (all of them with `force: true`), then answer
    the status at once; the probe answers update it later."""
    agent_id = _agent_id(params.agentId)
    refresh = probes.refresh_skill_runtime_facts(
        ctx.services, agent_id, force=params.force is True, timeout_ms=params.timeoutMs, config=ctx.config()
    )
    return {**_status(ctx, agent_id), **refresh}


@router.method(
    "node.probe.result",
    params=ProbeResultParams,
    result=ProbeAck,
    mode_error=(403, "Only node clients can submit probe results"),
    modes=NODE,
    scope=roles.NODE,
)
def node_probe_result(ctx: CallContext, params: ProbeResultParams) -> dict[str, Any]:
    """A node's answer to `node.probe`: the probed bins become part of its facts. Unknown probes are acknowledged
    with `dropped: true`; only the node a probe was sent to may answer it."""
    if not params.probeId or not params.probeId.strip():
        raise BadRequestError("probeId required")
    assert ctx.conn is not None and ctx.conn.node_id is not None
    return probes.accept_result(ctx.services, ctx.conn.node_id, params.probeId.strip(), params.bins)


# --- lifecycle hooks -------------------------------------------------------------------------------------------------


@router.on_node_connected
def _node_connected(ctx: CallContext, node_id: str, previous: str | None) -> None:
    services, config = ctx.services, ctx.config()

    def resume() -> None:
        probes.on_node_connected(services, node_id, config)

    # after the hello-ok, once the connection record is stored
    ctx.after_reply.append(resume)


router.on_call_timeout(probes.CALL_KIND)(probes.on_call_timeout)
router.on_call_node_lost(probes.CALL_KIND)(probes.on_call_node_lost)
router.on_node_gone(probes.on_node_gone)
