"""The local gateway's composition root (`orbital.local.services`, ADR 0049) as a running gateway uses it: the
Services it builds at start is what its handlers are served with, on the data directory's stores, the bridge's
sender and the Step Functions stand-in, with the local capabilities; stopping the gateway uninstalls it."""

from __future__ import annotations

from pathlib import Path

from orbital.client import GatewayClient
from orbital.local.sender import BridgeSender
from orbital.ports.capabilities import ON_AWS

from tests.e2e.conftest import in_process_gateway


def test_the_gateway_serves_its_handlers_with_the_services_its_root_built(tmp_path: Path) -> None:
    from orbital.runtime.services import get_services

    running = in_process_gateway(tmp_path / "data", persist=True, tick_interval=0)
    gateway = next(running)
    try:
        services = gateway.services
        assert get_services() is services  # what the handlers it invokes reach
        assert services.table is gateway.store.table and services.workspace is gateway.store.workspace
        assert services.workflows is gateway.stack.workflows
        assert isinstance(services.sender, BridgeSender) and services.sender.bridge is gateway.bridge
        assert services.backups is gateway.backups is not None
        assert services.capabilities.own_machine and services.capabilities.binary_frames
        with GatewayClient(gateway.ws_url, timeout=15) as client:
            hello = client.connect("client")
            assert hello["features"]["transferModes"] == ["binary", "text", "presigned"]  # the bridge's frames
            assert client.call("backup.status")["available"] is True  # the backups its root gave
    finally:
        for _ in running:  # stops the gateway
            pass
    assert gateway.services is None
    assert get_services() is not services and get_services().capabilities == ON_AWS
