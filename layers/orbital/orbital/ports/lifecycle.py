"""Socket end-of-life (spec §1.5): remove the connection and whatever registry entry it still owns.

Called from `$disconnect`, and whenever a post returns 410 (API Gateway does not guarantee `$disconnect`).
A close of a socket that no longer owns its id ("stale close") leaves the newer registration alone. What else goes
with the socket (calls pending on a node, probes, transfers) is up to the families' hooks (`Services.hooks`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.registry import SocketGone
    from orbital.store.connections import Connection

log = logging.getLogger("orbital.lifecycle")


def disconnect(services: Services, connection_id: str) -> None:
    conn = services.connections.remove(connection_id)
    if conn is None:
        return
    if conn.dialect is not None and conn.mode == "client" and not conn.client_id:
        pass  # another gateway's client: no registry entry, but what it owned goes with it (its tool calls)
    elif not services.connections.release_identity(conn, connection_id):
        return  # no id, or a newer socket holds it (a stale close)
    hooks = {
        "client": services.hooks.on_client_gone,
        "node": services.hooks.on_node_gone,
        "channel": services.hooks.on_channel_gone,
    }.get(conn.mode, [])
    for hook in hooks:
        _safe(hook, services, conn)


def _safe(hook: SocketGone, services: Services, conn: Connection) -> None:
    try:
        hook(services, conn)
    except Exception:
        log.exception("disconnect hook failed")
