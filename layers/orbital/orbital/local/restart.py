"""What a restart of the local gateway ends: everything that lived in the process that stopped.

The table and the bucket come back from the data directory; sockets and Step Functions executions do not. Before
the gateway serves again:

- every socket the registries still name is closed the way `$disconnect` closes one, so calls pending on a node
  fail at once (503), transfers and probes end, and the registries are clean for the sockets that reconnect;
- every run that held a session is ended with a clear error (its execution is gone), whoever waits for it hears of
  it (a channel, a cron record, a `gsv__SessionSend`), and the next queued message of that session starts;
- except a run paused for a tool approval: its approval, its wait group and the calls it waits for are stored, so a
  new execution of the same name waits for them again (`runs.resume`), and answering the approval after the
  restart goes on with the run (ADR 0040).

After a clean stop there is usually nothing to do; after a crash (`kill -9`, power loss) nothing stays pending.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbital.agent import approvals, events, runs
from orbital.ports import lifecycle
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.local")

INTERRUPTED = "The gateway restarted while this run was in progress"


def end_interrupted(services: Services) -> tuple[int, int]:
    """Close the sockets and end the runs a previous process left behind. Returns (sockets, runs)."""
    table = services.table
    sockets = set()
    for partition in (keys.CLIENTS_PK, keys.NODES_PK, keys.CHANNEL_SOCKETS_PK):
        for rec in table.query(partition):
            connection_id = rec.data.get("connectionId")
            if isinstance(connection_id, str) and connection_id:
                sockets.add(connection_id)
    for connection_id in sorted(sockets):
        try:
            lifecycle.disconnect(services, connection_id)
        except Exception:
            log.exception("could not close socket %s left by the previous process", connection_id)
    for partition in (keys.CLIENTS_PK, keys.NODES_PK, keys.CHANNEL_SOCKETS_PK):  # ids without a connection item
        for rec in table.query(partition):
            table.delete((rec.pk, rec.sk))
    ended = resumed = 0
    for entry in services.sessions.list_registry():
        key = entry.get("sessionKey")
        run = runs.current_run(services, key) if isinstance(key, str) else None
        if not isinstance(key, str) or run is None:
            continue
        if approvals.paused(services, run) and runs.resume(services, key, run):
            resumed += 1
            continue
        try:
            stopped = runs.stop(services, key, emit_error=events.error_emitter(services), reason=INTERRUPTED)
        except Exception:
            log.exception("could not end the interrupted run of %s", key)
            continue
        ended += int(stopped.was_running)
    if sockets or ended or resumed:
        log.info(
            "closed %d sockets, ended %d runs and resumed %d paused runs left by the previous process",
            len(sockets),
            ended,
            resumed,
        )
    return len(sockets), ended
