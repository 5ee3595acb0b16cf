"""Connections and the node / client / channel registries (DynamoDB, so every Lambda container sees one world)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.contention import retrying
from orbital.store.table import Record, Table


@dataclass
class Connection:
    connection_id: str
    mode: str
    connected_at: int
    client_id: str | None = None
    node_id: str | None = None
    channel: str | None = None
    account_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    dialect: str | None = None
    """Another gateway's client protocol this socket speaks (`xeno`, `exoclaw`, ...), fixed by its first frame;
    None for GSV."""

    @property
    def pending(self) -> bool:
        """Known from its upgrade (a bearer, a forced dialect) or a dialect's greeting, but registered by nothing
        yet: not connected as far as the methods are concerned."""
        return bool(self.extra.get("pending"))

    @property
    def channel_key(self) -> str | None:
        if self.channel is None or self.account_id is None:
            return None
        return keys.channel_key(self.channel, self.account_id)

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"mode": self.mode, "connectedAt": self.connected_at}
        for name, value in (
            ("clientId", self.client_id),
            ("nodeId", self.node_id),
            ("channel", self.channel),
            ("accountId", self.account_id),
            ("dialect", self.dialect),
        ):
            if value is not None:
                data[name] = value
        if self.extra:
            data["extra"] = self.extra
        return data

    @classmethod
    def from_record(cls, connection_id: str, rec: Record) -> Connection:
        d = rec.data
        return cls(
            connection_id=connection_id,
            mode=d["mode"],
            connected_at=int(d.get("connectedAt", 0)),
            client_id=d.get("clientId"),
            node_id=d.get("nodeId"),
            channel=d.get("channel"),
            account_id=d.get("accountId"),
            extra=d.get("extra") or {},
            dialect=d.get("dialect"),
        )


@dataclass(frozen=True)
class NodeEntry:
    """A connected node as its registry entry says; shared by readers (`ConnectionRepo.node`), so read-only."""

    node_id: str
    connection_id: str
    tools: list[dict[str, Any]]
    runtime: dict[str, Any] | None
    connected_at: int

    @classmethod
    def from_record(cls, rec: Record) -> NodeEntry:
        d = rec.data
        return cls(
            node_id=rec.sk,
            connection_id=d["connectionId"],
            tools=d.get("tools") or [],
            runtime=d.get("runtime"),
            connected_at=int(d.get("connectedAt", 0)),
        )


class ConnectionRepo:
    def __init__(self, table: Table, ttl_seconds: int) -> None:
        self.table = table
        self.ttl_seconds = ttl_seconds

    def _ttl(self) -> int:
        return int(time.time()) + self.ttl_seconds

    # --- connections ------------------------------------------------------------------------------------------

    def get(self, connection_id: str) -> Connection | None:
        rec = self.table.get(keys.connection(connection_id))
        return Connection.from_record(connection_id, rec) if rec else None

    def save(self, conn: Connection) -> None:
        self.table.put(keys.connection(conn.connection_id), conn.to_data(), ttl=self._ttl())

    def remove(self, connection_id: str) -> Connection | None:
        rec = self.table.delete(keys.connection(connection_id), return_old=True)
        return Connection.from_record(connection_id, rec) if rec else None

    # --- registries: put returns the previous owner so the caller can close a replaced socket --------------------

    def _claim(self, key: tuple[str, str], connection_id: str, data: dict[str, Any]) -> str | None:
        payload = {"connectionId": connection_id, **data}
        old = self.table.put(key, payload, ttl=self._ttl(), attrs={"cid": connection_id}, return_old=True)
        if old is None:
            return None
        previous = old.data.get("connectionId")
        return previous if previous and previous != connection_id else None

    def _release(self, key: tuple[str, str], connection_id: str) -> bool:
        try:
            self.table.delete(key, condition=cond.eq("cid", connection_id))
        except ConflictError:
            return False  # a newer socket owns the id: stale close
        return True

    def release_identity(self, conn: Connection, connection_id: str | None = None) -> bool:
        """Give up the client, node or channel id `conn` registered, if `connection_id` (default: its own) still
        holds it. False for a stale release (a newer socket owns the id) or a socket without an id."""
        owner = connection_id or conn.connection_id
        if conn.mode == "client" and conn.client_id:
            return self.release_client(conn.client_id, owner)
        if conn.mode == "node" and conn.node_id:
            return self.release_node(conn.node_id, owner)
        if conn.mode == "channel" and conn.channel and conn.account_id:
            return self.release_channel_socket(conn.channel, conn.account_id, owner)
        return False

    def claim_client(self, client_id: str, connection_id: str) -> str | None:
        return self._claim(keys.client(client_id), connection_id, {"connectedAt": int(time.time() * 1000)})

    def release_client(self, client_id: str, connection_id: str) -> bool:
        return self._release(keys.client(client_id), connection_id)

    def claim_node(
        self, node_id: str, connection_id: str, tools: list[dict[str, Any]], runtime: dict[str, Any] | None
    ) -> str | None:
        data = {"tools": tools, "runtime": runtime, "connectedAt": int(time.time() * 1000)}
        return self._claim(keys.node(node_id), connection_id, data)

    def release_node(self, node_id: str, connection_id: str) -> bool:
        return self._release(keys.node(node_id), connection_id)

    def nodes(self) -> list[NodeEntry]:
        entries = [NodeEntry.from_record(r) for r in self.table.query(keys.NODES_PK)]
        return sorted(entries, key=lambda n: (n.connected_at, n.node_id))

    def node(self, node_id: str) -> NodeEntry | None:
        """The node's entry (the same object for every reader until the entry changes: read-only)."""
        return self.table.view(keys.node(node_id), NodeEntry.from_record)

    # --- known nodes (kept after the socket goes, until `node.forget`) ----------------------------------------

    def node_seen(
        self,
        node_id: str,
        now_ms: int,
        *,
        platform: str | None,
        version: str | None,
        tools: list[dict[str, Any]],
        runtime: dict[str, Any] | None,
    ) -> None:
        """A node registered: remember it (first seen, last connect, platform and version as its `connect` gave
        them: a blank one keeps the previous value) with its capabilities and tool names."""
        key = keys.node_catalog(node_id)
        old = self.table.get(key)
        data: dict[str, Any] = dict(old.data) if old else {"nodeId": node_id, "firstSeenAt": now_ms}
        data["lastSeenAt"] = data["lastConnectedAt"] = now_ms
        for name, value in (("clientPlatform", platform), ("clientVersion", version)):
            if value and value.strip():
                data[name] = value.strip()
        data["hostCapabilities"] = list((runtime or {}).get("hostCapabilities") or [])
        data["tools"] = sorted(str(t.get("name")) for t in tools if isinstance(t, dict) and t.get("name"))
        self.table.put(key, data)

    def node_left(self, node_id: str, now_ms: int) -> None:
        """A node's socket went away: its entry stays, with when."""
        key = keys.node_catalog(node_id)
        old = self.table.get(key)
        if old is None:
            return
        try:  # never brings back an entry `node.forget` removed meanwhile
            self.table.put(
                key, {**old.data, "lastSeenAt": now_ms, "lastDisconnectedAt": now_ms}, condition=cond.exists("PK")
            )
        except ConflictError:
            pass

    def known_nodes(self) -> list[dict[str, Any]]:
        """Every node seen and not forgotten, sorted by id, each with `online` (whether it is connected now)."""
        connected = {n.node_id for n in self.nodes()}
        entries = [dict(r.data, online=r.sk in connected) for r in self.table.query(keys.NODE_CATALOG_PK)]
        return sorted(entries, key=lambda e: str(e.get("nodeId")))

    def forget_node(self, node_id: str) -> bool:
        """Remove a node's entry; whether there was one."""
        return self.table.delete(keys.node_catalog(node_id), return_old=True) is not None

    def update_node_runtime(
        self, node_id: str, connection_id: str, mutate: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> bool:
        """Apply `mutate` to the node's runtime facts while `connection_id` still owns the node. Optimistic (a
        version attribute), so concurrent updates (two probe results) both land. False if the node moved on."""
        key = keys.node(node_id)

        def attempt() -> bool:
            rec = self.table.get(key)
            if rec is None or rec.data.get("connectionId") != connection_id:
                return False
            version = int(rec.attrs.get("rv", 0) or 0)
            data = dict(rec.data)
            data["runtime"] = mutate(dict(data.get("runtime") or {}))
            self.table.put(
                key,
                data,
                ttl=rec.ttl,
                attrs={"cid": connection_id, "rv": version + 1},
                condition=cond.eq("cid", connection_id) & (cond.not_exists("rv") | cond.eq("rv", version)),
            )
            return True

        return retrying(f"node {node_id} runtime", attempt)

    def claim_channel_socket(self, channel: str, account_id: str, connection_id: str) -> str | None:
        return self._claim(keys.channel_socket(channel, account_id), connection_id, {"channel": channel})

    def release_channel_socket(self, channel: str, account_id: str, connection_id: str) -> bool:
        return self._release(keys.channel_socket(channel, account_id), connection_id)

    def channel_sockets(self) -> dict[str, str]:
        return {r.sk: r.data["connectionId"] for r in self.table.query(keys.CHANNEL_SOCKETS_PK)}

    # --- channel registry (kept after the socket goes) ----------------------------------------------------------

    def register_channel(self, channel: str, account_id: str) -> None:
        key = keys.channel_entry(channel, account_id)
        existing = self.table.get(key)
        data: dict[str, Any] = dict(existing.data) if existing else {}
        data.update({"channel": channel, "accountId": account_id, "connectedAt": int(time.time() * 1000)})
        self.table.put(key, data)

    def touch_channel(self, channel: str, account_id: str, now_ms: int) -> None:
        """A message came in on a registered channel account: remember when (`lastMessageAt`)."""
        key = keys.channel_entry(channel, account_id)
        existing = self.table.get(key)
        if existing is not None:
            try:  # never brings back an entry a `channel.stop` removed meanwhile
                self.table.put(key, {**existing.data, "lastMessageAt": now_ms}, condition=cond.exists("PK"))
            except ConflictError:
                pass

    def forget_channel(self, channel: str, account_id: str) -> None:
        self.table.delete(keys.channel_entry(channel, account_id))

    def channels(self) -> list[dict[str, Any]]:
        return [r.data for r in self.table.query(keys.CHANNELS_PK)]
