"""Helpers for tests that drive agent runs: the chat events a socket received, waiting for a run to end."""

from __future__ import annotations

from typing import Any

from tests.conftest import wait_for


def chat_events(sender: Any, connection_id: str) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("event") == "chat"]


def final_of(sender: Any, connection_id: str, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        for event in chat_events(sender, connection_id):
            if event.get("runId") == run_id and event.get("state") in ("final", "error"):
                return event
        return None

    return wait_for(done, timeout=timeout)


def node_events(sender: Any, node: Any, event: str) -> list[dict[str, Any]]:
    return [
        f["payload"] for f in sender.frames_to(node.connection_id) if isinstance(f, dict) and f.get("event") == event
    ]


def follow_run(client: Any, run_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every `chat` event of one run a real client receives, up to its `final` or `error` (events of other runs
    that arrive meanwhile are skipped)."""
    import time

    deadline = time.monotonic() + timeout
    seen: list[dict[str, Any]] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"run {run_id} did not end within {timeout}s; saw {seen}")
        frame = client.next_event("chat", timeout=remaining)
        payload = frame.get("payload") or {}
        if payload.get("runId") != run_id:
            continue
        seen.append(payload)
        if payload.get("state") in ("final", "error"):
            return seen


def configure_fake_model(client: Any, base_url: str) -> None:
    """Point a gateway at the scripted model server (OpenAI wire format)."""
    client.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-test"}})
    client.call("config.set", {"path": "providers", "value": {"openai": {"baseUrl": f"{base_url}/v1"}}})
    client.call("config.set", {"path": "apiKeys.openai", "value": "sk-e2e-key"})
