"""Methods of the `spend` family: what the gateway has spent in US dollars against its caps (ADR 0044).

The counting is done by `orbital.agent.spend` around every model call; this family only reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.agent import spend as engine
from orbital.errors import BadRequestError
from orbital.methods.sessions import session_key_param
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("spend")


class SpendStatusParams(Params):
    sessionKey: Text = None
    """A session: its own period (`session`) is listed too, and its agent's limits."""
    agentId: Text = None
    """An agent: its daily and monthly limits are listed too (else the session's agent)."""


class SpendPeriod(Result):
    period: str
    """`session`, `daily` or `monthly`."""
    scope: str
    """`global`, `agent:{id}`, `session:{key}` or `cron:{jobId}`."""
    usedUsd: float
    """Settled usage in the period."""
    reservedUsd: float
    """The worst cases of the model calls in flight."""
    limitUsd: float | None
    resetsAt: int | None
    """When the period ends (epoch ms); null for a session (it resets with /new)."""


class SpendTop(Result):
    sessions: list[dict[str, Any]]
    """`{sessionKey, usedUsd}` of the day's most expensive sessions."""
    jobs: list[dict[str, Any]]
    """`{jobId, usedUsd}` of the day's most expensive cron jobs."""


class SpendStatusResult(Result):
    currency: str
    timeZone: str
    periods: list[SpendPeriod]
    top: SpendTop
    alertAt: float


@router.method("spend.status", params=SpendStatusParams, result=SpendStatusResult, reads_only=True, modes=CLIENT)
def spend_status(ctx: CallContext, params: SpendStatusParams) -> dict[str, Any]:
    """What is spent in US dollars: used, reserved and limit per period (session, daily, monthly) and scope (the
    gateway, the agent, the session), the day's top sessions and cron jobs, and the share of a limit that alerts."""
    session_key = session_key_param(ctx, params.sessionKey) if params.sessionKey and params.sessionKey.strip() else None
    agent_id = params.agentId.strip() if params.agentId and params.agentId.strip() else None
    if agent_id is not None and len(agent_id) > 200:
        raise BadRequestError("agentId too long")
    return engine.status(
        ctx.services, ctx.services.config.effective(), session_key=session_key, agent_id=agent_id, now_ms=ctx.now_ms()
    )
