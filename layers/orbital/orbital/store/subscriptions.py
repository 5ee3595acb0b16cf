"""Run subscriptions: a dialect socket (xeno, Exoclaw, ...) receives frames only for the runs it started.

A subscription is one item beside the client sockets (`keys.run_subscription`), written by the dialect's translator
before it starts the run: the run, the socket, its dialect and what the dialect needs to correlate the run's frames
with the request that started it (`ref`: a JSON-RPC id, a request id, ...). The run's steps read it with the
session's audience (one query for both, `agent.events.Audience`) and hand every event of the run to the dialect's
encoder (`Hooks.run_event_encoders`). It goes with the run's last event, or with its socket (410), else its ttl.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import Record, Table

TTL_SECONDS = 3 * 3600
"""Longer than any socket lives (2 h on API Gateway): a subscription whose run never ended goes by itself."""
SEQUENCE = "seq"
"""The attribute of a subscription that counts the events its dialect numbered for it (`count_events`)."""


@dataclass
class Subscription:
    run_id: str
    connection_id: str
    dialect: str
    session_key: str
    ref: dict[str, Any] = field(default_factory=dict)
    """What the dialect needs to answer in kind (ids to echo, when the run was asked for, ...)."""
    scratch: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """What an encoder keeps between the events of one step of the run (the text streamed so far, when it last
    sent it): in memory only, never stored, gone when the step's audience reads its subscribers again (the next
    step, the run's end)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "connectionId": self.connection_id,
            "dialect": self.dialect,
            "sessionKey": self.session_key,
            "ref": self.ref,
        }

    @classmethod
    def from_record(cls, rec: Record) -> Subscription | None:
        d = rec.data
        run_id, cid, dialect = d.get("runId"), d.get("connectionId"), d.get("dialect")
        if not (isinstance(run_id, str) and isinstance(cid, str) and isinstance(dialect, str)):
            return None
        ref = d.get("ref")
        return cls(run_id, cid, dialect, str(d.get("sessionKey") or ""), ref if isinstance(ref, dict) else {})


def is_subscription(sk: str) -> bool:
    return sk.startswith(keys.RUN_SUBSCRIPTION_PREFIX)


def subscribe(table: Table, sub: Subscription) -> None:
    table.put(keys.run_subscription(sub.run_id, sub.connection_id), sub.to_data(), ttl=int(time.time()) + TTL_SECONDS)


def drop(table: Table, sub: Subscription) -> None:
    table.delete(keys.run_subscription(sub.run_id, sub.connection_id))


def of_connection(table: Table, connection_id: str) -> list[Subscription]:
    """The runs a socket follows now (read with the other client items: one query, cached locally)."""
    found = []
    for rec in table.query(keys.CLIENTS_PK, sk_prefix=keys.RUN_SUBSCRIPTION_PREFIX):
        sub = Subscription.from_record(rec)
        if sub is not None and sub.connection_id == connection_id:
            found.append(sub)
    return found


def of_run(table: Table, run_id: str) -> list[Subscription]:
    """The sockets that follow one run."""
    found = []
    for rec in table.query(keys.CLIENTS_PK, sk_prefix=f"{keys.RUN_SUBSCRIPTION_PREFIX}{run_id}~"):
        sub = Subscription.from_record(rec)
        if sub is not None and sub.run_id == run_id:
            found.append(sub)
    return found


def every(table: Table) -> list[Subscription]:
    """Every run subscription of every socket."""
    found = []
    for rec in table.query(keys.CLIENTS_PK, sk_prefix=keys.RUN_SUBSCRIPTION_PREFIX):
        sub = Subscription.from_record(rec)
        if sub is not None:
            found.append(sub)
    return found


def count_events(table: Table, run_id: str, connection_id: str, count: int) -> int | None:
    """Add `count` to the events counted on a subscription, in one atomic addition (whichever process or Lambda
    counts them); the new total, or None when the subscription is gone (nothing is counted then)."""
    try:
        rec = table.update(
            keys.run_subscription(run_id, connection_id), add={SEQUENCE: count}, condition=cond.exists("PK")
        )
    except ConflictError:
        return None
    return int(rec.attrs.get(SEQUENCE) or 0) if rec is not None else 0
