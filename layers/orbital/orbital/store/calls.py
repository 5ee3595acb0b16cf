"""Deferred calls in the table: one item per pending call, the per-second due markers, and the answered outcome.

A call's item (`keys.pending_call`) holds its description (`PendingCall`), the state `st` (pending | done), its kind
`ck`, the task token `tok` of an execution of the earlier definition, and once answered the outcome `out` (its JSON,
or a reference to it in the workspace when it is too large for an item). While pending it sits on GSI1 under its
node (`keys.node_calls_pk`), so a node's loss and the overdue sweep read only what is pending. A due marker
(`keys.call_due`) puts the call in the partition of the second its timer answers it.

The rules (who answers, the timer, the families' reactions) are the deferred-call engine's
(`orbital.engines.deferred`); this repository only reads and writes the items, each claim one conditional write.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConditionFailedError, Record, Table

if TYPE_CHECKING:
    from orbital.store.workspace import Workspace

PENDING = "pending"
DONE = "done"
TOMBSTONE_SECONDS = 3600
"""How long an answered call is remembered, so a late result is reported as dropped rather than unknown."""
INLINE_OUTCOME_BYTES = 256 * 1024
"""An outcome larger than this (JSON) is kept in S3 and referenced from the call (DynamoDB items cap at 400 KB)."""
OUTCOME_REF = "$outcome"


@dataclass
class PendingCall:
    call_id: str
    kind: str
    node_id: str
    node_connection_id: str
    timeout_ms: int
    created_at: int
    caller_connection_id: str | None = None
    frame_id: Any = None
    tool: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "callId": self.call_id,
            "kind": self.kind,
            "nodeId": self.node_id,
            "nodeConnectionId": self.node_connection_id,
            "timeoutMs": self.timeout_ms,
            "createdAt": self.created_at,
            "callerConnectionId": self.caller_connection_id,
            "frameId": self.frame_id,
            "tool": self.tool,
            "extra": self.extra,
        }

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> PendingCall:
        return cls(
            call_id=d["callId"],
            kind=d["kind"],
            node_id=d["nodeId"],
            node_connection_id=d.get("nodeConnectionId") or "",
            timeout_ms=int(d.get("timeoutMs") or 0),
            created_at=int(d.get("createdAt") or 0),
            caller_connection_id=d.get("callerConnectionId"),
            frame_id=d.get("frameId"),
            tool=d.get("tool"),
            extra=d.get("extra") or {},
        )

    @property
    def timeout_seconds(self) -> int:
        return max(1, math.ceil(self.timeout_ms / 1000))


@dataclass
class Lookup:
    call: PendingCall
    state: str


@dataclass
class NodeAnswer:
    """What `CallRepo.claim_answer` did: the call it claimed (and the task token of an execution of the earlier
    definition, if one was recorded), or else the call as it stood (None: there is none, or it has expired)."""

    claimed: tuple[PendingCall, str | None] | None = None
    found: Lookup | None = None


def _lookup(rec: Record) -> Lookup:
    return Lookup(PendingCall.from_data(rec.data), str(rec.attrs.get("st", PENDING)))


class CallRepo:
    def __init__(self, table: Table, workspace: Callable[[], Workspace]) -> None:
        """`workspace` gives where an outcome too large for an item is kept, asked for only when one is (so a
        handler that never meets one never builds a client for it)."""
        self.table = table
        self._workspace = workspace

    def create(self, call: PendingCall) -> None:
        """Record a pending call. A call without a node (waiting for another run) is not indexed by node."""
        ttl = int(time.time()) + call.timeout_seconds + TOMBSTONE_SECONDS
        self.table.put(
            keys.pending_call(call.call_id),
            call.to_data(),
            attrs={"st": PENDING, "ck": call.kind},
            gsi=keys.node_calls_index(call.node_id, call.call_id) if call.node_id else None,
            ttl=ttl,
            condition=cond.not_exists("PK"),
        )

    def mark_due(self, second: int, call: PendingCall) -> None:
        """Put the call in the partition of the second whose timer answers it."""
        self.table.put(keys.call_due(second, call.call_id), {"kind": call.kind}, ttl=second + TOMBSTONE_SECONDS)

    def pending_due(self, second: int) -> list[str]:
        """The ids of the calls due at `second` that are still pending, in the order they were marked."""
        call_ids = [rec.sk for rec in self.table.query(keys.call_due_pk(second))]
        calls = self.table.get_many(keys.pending_call(call_id) for call_id in call_ids)
        pending: list[str] = []
        for call_id in call_ids:
            rec = calls.get(keys.pending_call(call_id))
            if rec is not None and rec.attrs.get("st", PENDING) == PENDING:
                pending.append(call_id)
        return pending

    def get(self, call_id: str) -> Lookup | None:
        rec = self.table.get(keys.pending_call(call_id))
        return _lookup(rec) if rec is not None else None

    def claim(self, call_id: str, outcome: dict[str, Any] | None = None) -> tuple[PendingCall, str | None] | None:
        """Flip pending → done (storing `outcome`, if given, for whoever consumes it later). Returns the call and
        the task token if one was recorded; None if the call was already answered or never existed. The answered
        call leaves its node's index, so that index holds only what is pending (node loss and the sweep read it)."""
        done: dict[str, Any] = {"st": DONE}
        if outcome is not None:
            done["out"] = self.stored_outcome(call_id, outcome)
        try:
            old = self.table.update(
                keys.pending_call(call_id),
                set_attrs=done,
                condition=cond.eq("st", PENDING),
                return_values="ALL_OLD",
                unindex=True,
            )
        except ConflictError:
            return None
        if old is None:
            return None
        return PendingCall.from_data(old.data), old.attrs.get("tok")

    def claim_answer(self, call_id: str, node_id: str, kind: str) -> NodeAnswer:
        """A node's answer to a call whose outcome is only passed on (`kind`, no outcome stored), in one write: the
        call is claimed if it is pending, of that kind and pending on that node. Otherwise the same request reads
        the call as it stands (another kind, another node, answered already); when none comes back (no such call),
        it is read to make sure. A call recorded without its kind (`ck`, by an earlier version) is refused too, and
        found."""
        try:
            old = self.table.update(
                keys.pending_call(call_id),
                set_attrs={"st": DONE},
                condition=cond.eq("st", PENDING) & cond.eq("ck", kind) & cond.eq("GSI1PK", keys.node_calls_pk(node_id)),
                return_values="ALL_OLD",
                unindex=True,
                current_on_conflict=True,
            )
        except ConditionFailedError as refused:
            rec = refused.current
            if rec is None:  # no call, or a store that did not send the item back: a read tells which
                return NodeAnswer(found=self.get(call_id))
            return NodeAnswer(found=_lookup(rec))
        if old is None:
            return NodeAnswer()
        return NodeAnswer(claimed=(PendingCall.from_data(old.data), old.attrs.get("tok")))

    def record_answered(self, call_id: str, outcome: dict[str, Any], *, group: str | None = None) -> bool:
        """Record a call that was answered before it could be created (its launch failed). False if a record
        already exists (someone answered it)."""
        try:
            self.table.put(
                keys.pending_call(call_id),
                {"callId": call_id, "kind": "failed", "nodeId": "", "extra": {"group": group} if group else {}},
                attrs={"st": DONE, "out": self.stored_outcome(call_id, outcome)},
                ttl=int(time.time()) + TOMBSTONE_SECONDS,
                condition=cond.not_exists("PK"),
            )
        except ConflictError:
            return False
        return True

    def register_token(self, call_id: str, token: str) -> bool:
        """Record the execution's task token while the call is pending. False: the call was already answered."""
        try:
            self.table.update(
                keys.pending_call(call_id),
                set_attrs={"tok": token},
                condition=cond.eq("st", PENDING),
                return_values="NONE",
            )
        except ConflictError:
            return False
        return True

    def pending_on_node(self, node_id: str) -> list[PendingCall]:
        recs = self.table.query_index(keys.node_calls_pk(node_id))
        return [PendingCall.from_data(r.data) for r in recs if r.attrs.get("st") == PENDING]

    # --- outcomes -------------------------------------------------------------------------------------------------

    def stored_outcome(self, call_id: str, outcome: dict[str, Any]) -> str:
        """The `out` attribute for an outcome: its JSON, or (too large for an item) a reference to it in S3."""
        text = json.dumps(outcome, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode("utf-8")) <= INLINE_OUTCOME_BYTES:
            return text
        ref = keys.call_outcome_blob(call_id)
        self._workspace().put(ref, text.encode("utf-8"), content_type="application/json")
        return json.dumps({OUTCOME_REF: ref})

    def outcome_of(self, rec: Record) -> dict[str, Any]:
        """The stored outcome of an answered call (`{"result": …}` or `{"error": …}`)."""
        raw = rec.attrs.get("out")
        if not isinstance(raw, str) or not raw:
            return {"error": "No answer was recorded"}
        value = json.loads(raw)
        if isinstance(value, dict) and isinstance(value.get(OUTCOME_REF), str):
            found = self._workspace().get(value[OUTCOME_REF])
            value = json.loads(found[0]) if found is not None else {"error": "The answer is no longer available"}
        return value if isinstance(value, dict) else {"result": value}
