"""`connect` and `$disconnect` of one socket handled at the same time (two Lambdas on AWS): whatever the
interleaving, no registry entry outlives its socket."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.ports.lifecycle import disconnect
from orbital.store import keys

from tests.conftest import NODE_RUNTIME, NODE_TOOLS, Rpc

MODES = {
    "client": ({"mode": "client", "id": "racer"}, "claim_client", keys.client("racer")),
    "node": ({"mode": "node", "id": "racer"}, "claim_node", keys.node("racer")),
    "channel": ({"mode": "channel", "id": "racer", "channel": "test"}, "claim_channel_socket", None),
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("when", ["after-the-record", "after-the-claim"])
def test_a_disconnect_during_connect_leaves_no_orphan(
    services: Any, monkeypatch: pytest.MonkeyPatch, mode: str, when: str
) -> None:
    client, claim_name, registry_key = MODES[mode]
    repo = services.connections
    cid = f"race-{mode}-{when}"
    if when == "after-the-record":  # $disconnect removes the record before the claim lands
        save = repo.save

        def save_then_disconnect(conn: Any) -> None:
            save(conn)
            disconnect(services, cid)

        monkeypatch.setattr(repo, "save", save_then_disconnect)
    else:  # $disconnect comes right after the claim
        claim = getattr(repo, claim_name)

        def claim_then_disconnect(*args: Any, **kwargs: Any) -> Any:
            previous = claim(*args, **kwargs)
            disconnect(services, cid)
            return previous

        monkeypatch.setattr(repo, claim_name, claim_then_disconnect)
    params: dict[str, Any] = {"minProtocol": 1, "client": client}
    if mode == "node":
        params.update(tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
    Rpc(services, cid).frame("connect", params)
    assert repo.get(cid) is None
    if registry_key is not None:
        assert services.table.get(registry_key) is None
    else:
        assert repo.channel_sockets() == {}
