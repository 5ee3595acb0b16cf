"""Transfers in the table (spec §4): one item per active transfer under `TRANSFERS`, and their id counter.

The item's JSON payload is the transfer's static description (`Transfer.to_data`); its state and counters are flat
attributes, so each step changes them atomically with one conditional update: `xs` (the state: meta-wait,
accept-wait, streaming, completing, finishing), `size` and `mime` (announced by the source), `b` (bytes received,
counted as a chunk arrives), `l` (bytes landed: stored as a part, or relayed to the destination) and `sc` (the
source's socket, which alone may send chunks). The protocol's rules are the transfer engine's
(`orbital.engines.transfer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import Record, Table

GSV = "gsv"
"""The node name of the agent workspace in a transfer endpoint (`gsv:path`)."""


@dataclass
class Endpoint:
    node: str
    path: str

    @property
    def is_workspace(self) -> bool:
        return self.node == GSV

    def __str__(self) -> str:
        return f"{self.node}:{self.path}"


@dataclass
class Transfer:
    transfer_id: int
    source: Endpoint
    destination: Endpoint
    mode: str
    agent_id: str
    call_id: str
    source_conn: str | None
    dest_conn: str | None
    state: str = "init"
    size: int | None = None
    mime: str | None = None
    bytes: int = 0
    landed: int = 0

    def to_data(self) -> dict[str, Any]:
        return {
            "transferId": self.transfer_id,
            "source": str(self.source),
            "destination": str(self.destination),
            "mode": self.mode,
            "agentId": self.agent_id,
            "callId": self.call_id,
            "sourceConn": self.source_conn,
            "destConn": self.dest_conn,
        }

    @classmethod
    def from_record(cls, data: dict[str, Any], attrs: dict[str, Any]) -> Transfer:
        src_node, _, src_path = data["source"].partition(":")
        dst_node, _, dst_path = data["destination"].partition(":")
        return cls(
            transfer_id=int(data["transferId"]),
            source=Endpoint(src_node, src_path),
            destination=Endpoint(dst_node, dst_path),
            mode=data["mode"],
            agent_id=data["agentId"],
            call_id=data["callId"],
            source_conn=data.get("sourceConn"),
            dest_conn=data.get("destConn"),
            state=str(attrs.get("xs", "init")),
            size=attrs.get("size") if isinstance(attrs.get("size"), int) else None,
            mime=attrs.get("mime") or None,
            bytes=int(attrs.get("b", 0) or 0),
            landed=int(attrs.get("l", 0) or 0),
        )

    def workspace_key(self, endpoint: Endpoint) -> str:
        return keys.workspace_object(self.agent_id, endpoint.path)

    def result(self, transferred: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": str(self.source),
            "destination": str(self.destination),
            "bytesTransferred": transferred,
        }
        if self.mime:
            out["mime"] = self.mime
        return out


def _transfer(rec: Record | None) -> Transfer | None:
    return Transfer.from_record(rec.data, rec.attrs) if rec is not None else None


class TransferRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def next_id(self) -> int:
        """A gateway-wide increasing transfer id (one atomic ADD)."""
        return self.table.next_counter(keys.counter("transfer"))

    def create(self, xfer: Transfer, *, state: str) -> None:
        """Record a new transfer in its first `state`, with the size and mime already known (a workspace source)."""
        attrs: dict[str, Any] = {"xs": state, "b": 0, "sc": xfer.source_conn or ""}
        if xfer.size is not None:
            attrs.update(size=xfer.size, mime=xfer.mime or "")
        self.table.put(keys.transfer(xfer.transfer_id), xfer.to_data(), attrs=attrs)

    def load(self, transfer_id: int) -> Transfer | None:
        return _transfer(self.table.get(keys.transfer(transfer_id)))

    def active(self) -> list[Transfer]:
        return [Transfer.from_record(r.data, r.attrs) for r in self.table.query(keys.TRANSFERS_PK)]

    def set(self, transfer_id: int, **attrs: Any) -> None:
        """Set state attributes of a transfer that still exists (one that ended meanwhile is left ended)."""
        try:
            self.table.update(
                keys.transfer(transfer_id), set_attrs=attrs, condition=cond.exists("PK"), return_values="NONE"
            )
        except ConflictError:
            pass  # finished meanwhile

    def count_received(self, transfer_id: int, size: int, connection_id: str) -> Transfer | None:
        """Count a chunk of `size` bytes as received, if the transfer is streaming (or completing) and
        `connection_id` is its source; the transfer after the count, or None (the chunk is to be dropped)."""
        try:
            rec = self.table.update(
                keys.transfer(transfer_id),
                add={"b": size},
                condition=(cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", connection_id),
            )
        except ConflictError:
            return None
        return _transfer(rec)

    def count_landed(self, transfer_id: int, size: int) -> Transfer | None:
        """Count `size` bytes as landed; the transfer after the count, or None when it has ended meanwhile."""
        try:
            rec = self.table.update(keys.transfer(transfer_id), add={"l": size}, condition=cond.exists("PK"))
        except ConflictError:
            return None
        return _transfer(rec)

    def mark_completing(self, transfer_id: int) -> Transfer | None:
        """streaming → completing (the source says it sent everything); the transfer after the change, or None
        when it was not streaming (already completing, or ended)."""
        try:
            rec = self.table.update(
                keys.transfer(transfer_id), set_attrs={"xs": "completing"}, condition=cond.eq("xs", "streaming")
            )
        except ConflictError:
            return None
        return _transfer(rec)

    def claim_finishing(self, transfer_id: int) -> bool:
        """completing → finishing, won by one handler only: whoever wins finishes the transfer."""
        try:
            self.table.update(
                keys.transfer(transfer_id),
                set_attrs={"xs": "finishing"},
                condition=cond.eq("xs", "completing"),
                return_values="NONE",
            )
        except ConflictError:
            return False
        return True

    def delete(self, transfer_id: int) -> None:
        self.table.delete(keys.transfer(transfer_id))
