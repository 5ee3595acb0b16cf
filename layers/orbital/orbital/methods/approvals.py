"""`approval.list`, `approval.resolve`, `approval.history`: the tool approvals of paused runs (ADR 0040).

A run whose tool call the policy (`toolApproval`) asks about pauses until someone answers: a `yes` / `no` typed into
the session (`chat.send`, a channel), a button, or `approval.resolve`. The first answer wins; clients hear of both
ends (`approval.requested`, `approval.resolved` events).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from orbital.agent import approvals
from orbital.domain import roles
from orbital.errors import BadRequestError, ForbiddenError
from orbital.methods.sessions import session_key_param
from orbital.protocol.params import Count, Text
from orbital.protocol.registry import CLIENT, Params, Result, Router
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("approvals")

CLIENT_VIAS = ("console", "cli", "rpc")


def answerer(ctx: CallContext) -> dict[str, Any]:
    """Who answers from this connection: `{kind: "client", id, label}` (the client id it connected with)."""
    conn = ctx.conn
    ident = (conn.client_id if conn is not None else None) or ctx.connection_id
    return {"kind": "client", "id": str(ident), "label": str(ident)}


def refuse_unless_own(ctx: CallContext, run: dict[str, Any] | None) -> None:
    """A device whose role lacks `operate` (a `client`) may answer only the tool approvals of a run it started: one
    whose `chat.send` came from a connection with its own device id (ADR 0042). 403 otherwise."""
    extra = ctx.conn.extra if ctx.conn is not None else {}
    role = roles.role_of(extra)
    if roles.allows(role, roles.OPERATE):
        return
    device = extra.get("deviceId")
    origin = run.get("origin") if isinstance(run, dict) else None
    started_by = origin.get("deviceId") if isinstance(origin, dict) else None
    if not device or started_by != device:
        raise ForbiddenError(f"A device whose role is {role} may answer only the tool calls of runs it started")


def run_of(ctx: CallContext, approval_id: str) -> dict[str, Any] | None:
    """The run a pending approval paused (its session's current run, when it is that one); None otherwise."""
    rec = ctx.services.table.get(keys.approval(approval_id))
    if rec is None:
        return None
    session_key = rec.data.get("sessionKey")
    meta = ctx.services.sessions.load_meta(str(session_key)) if session_key else None
    run = (meta or {}).get("currentRun")
    return run if isinstance(run, dict) and run.get("runId") == rec.data.get("runId") else None


class ApprovalListParams(Params):
    sessionKey: Text = None


class ApprovalView(Result):
    approvalId: str
    sessionKey: str
    runId: str | None = None
    callId: str | None = None
    tool: str
    args: Any = None
    ruleId: str | None = None
    reason: str | None = None
    taint: dict[str, Any]
    requestedAt: int
    expiresAt: int
    prompt: str
    state: str


class ApprovalListResult(Result):
    approvals: list[ApprovalView]


@router.method(
    "approval.list",
    params=ApprovalListParams,
    result=ApprovalListResult,
    modes=CLIENT,
    scope=roles.READ,
    reads_only=True,
)
def approval_list(ctx: CallContext, params: ApprovalListParams) -> dict[str, Any]:
    """The tool approvals waiting for an answer, oldest first: of one session (`sessionKey`) or of every session.
    Each names its session and run, the tool (as the model called it, `{nodeId}__Bash`), its arguments (secrets
    masked, strings cut to 400 characters), the policy rule and reason that asked, the run's taint, when it was asked
    and when it times out (`expiresAt`), and the prompt GSV clients were shown."""
    key = session_key_param(ctx, params.sessionKey) if params.sessionKey else None
    return {"approvals": approvals.pending(ctx.services, key)}


class ApprovalResolveParams(Params):
    approvalId: Text = None
    decision: Text = None
    remember: Text = None
    via: Text = None


class ApprovalResolveResult(Result):
    approvalId: str
    decision: str
    resolved: bool
    message: str | None = None


@router.method(
    "approval.resolve", params=ApprovalResolveParams, result=ApprovalResolveResult, modes=CLIENT, scope=roles.CHAT
)
def approval_resolve(ctx: CallContext, params: ApprovalResolveParams) -> dict[str, Any]:
    """Answer a tool approval: `decision` "approve" (the call is dispatched and the run goes on) or "deny" (the model
    is told `Tool execution denied by user`). `remember: "session"` with "approve" also allows, for the rest of that
    session, every call the same rule would ask about (or, where no rule matched, the same tool with the same
    arguments). `via` ("console", "cli" or "rpc", the default) records where the answer came from.

    The first answer wins, from wherever it comes: `{approvalId, decision, resolved: true}`. A later one gets
    `resolved: false`, the decision that stands and a `message` ("Already approved by … at …", "Timed out at …").
    `404 Unknown approval id: {id}`; `403` for a caller who may not answer it (a `client` device answers only the
    tool calls of runs it started, ADR 0042)."""
    if not params.approvalId or not params.approvalId.strip():
        raise BadRequestError("approvalId required")
    if params.decision not in ("approve", "deny"):
        raise BadRequestError('decision must be "approve" or "deny"')
    if params.remember not in (None, "session"):
        raise BadRequestError('remember must be "session"')
    via = params.via or "rpc"
    if via not in CLIENT_VIAS:
        raise BadRequestError(f"via must be one of {', '.join(CLIENT_VIAS)}")
    remember: Literal["session"] | None = "session" if params.remember == "session" else None
    if not roles.allows(roles.role_of(ctx.conn.extra if ctx.conn is not None else None), roles.OPERATE):
        refuse_unless_own(ctx, run_of(ctx, params.approvalId.strip()))
    return approvals.resolve(
        ctx.services, params.approvalId.strip(), params.decision, by=answerer(ctx), via=via, remember=remember
    )


class ApprovalHistoryParams(Params):
    sessionKey: Text = None
    limit: Count = None


class ApprovalHistoryEntry(Result):
    approvalId: str
    runId: str | None = None
    tool: str
    args: Any = None
    ruleId: str | None = None
    reason: str | None = None
    taint: dict[str, Any] | None = None
    decision: str
    by: dict[str, Any]
    via: str
    requestedAt: int | None = None
    decidedAt: int


class ApprovalHistoryResult(Result):
    entries: list[ApprovalHistoryEntry]


@router.method(
    "approval.history", params=ApprovalHistoryParams, result=ApprovalHistoryResult, modes=CLIENT, scope=roles.READ
)
def approval_history(ctx: CallContext, params: ApprovalHistoryParams) -> dict[str, Any]:
    """Who decided which tool approval of a session, how, when and from where, newest first (`limit`, default 50,
    at most 500). `decision` is "approve", "deny", "timeout" (nobody answered in time) or "cancel" (the run was
    stopped or reset); `via` is where the answer came from ("console", "cli", "chat", "telegram", "xeno",
    "exoclaw", "windie", "rpc", "timeout", "stop") and `by` who gave it (`{kind, id, label}`)."""
    key = session_key_param(ctx, params.sessionKey)
    if params.limit is not None and params.limit < 1:
        raise BadRequestError("limit must be a positive number")
    return {"entries": approvals.history(ctx.services, key, params.limit)}
