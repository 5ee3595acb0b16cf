"""The one cache of SDK clients the model adapters share (orbital.agent.providers._clients)."""

from __future__ import annotations

import threading
from typing import Any

from orbital.agent.providers import _clients
from orbital.agent.providers import anthropic as anthropic_adapter
from orbital.agent.providers import openai as openai_adapter
from orbital.agent.providers._clients import MAX_PER_SDK, sdk_client
from orbital.agent.providers._types import ProviderInfo


def info(base_url: str = "http://127.0.0.1:9/v1", key: str = "k-1", **headers: str) -> ProviderInfo:
    return ProviderInfo(name="test", api="openai", base_url=base_url, api_key=key, headers=dict(headers))


class Made:
    def __init__(self, sdk: str, info: ProviderInfo) -> None:
        self.sdk, self.info = sdk, info


def make_a(info: ProviderInfo) -> Any:
    return Made("a", info)


def make_b(info: ProviderInfo) -> Any:
    return Made("b", info)


def test_one_client_per_sdk_endpoint_key_and_headers() -> None:
    first = sdk_client(info(), make_a)
    assert sdk_client(info(), make_a) is first
    assert sdk_client(info(key="k-2"), make_a) is not first
    assert sdk_client(info(base_url="http://127.0.0.1:9/other"), make_a) is not first
    assert sdk_client(info(**{"X-Relay": "r"}), make_a) is not first
    other = sdk_client(info(), make_b)
    assert other is not first and other.sdk == "b"


def test_threads_meeting_a_new_endpoint_share_one_client() -> None:
    made: list[Made] = []
    gate = threading.Barrier(8)

    def make(info: ProviderInfo) -> Any:
        client = Made("counted", info)
        made.append(client)
        return client

    got: list[Any] = []

    def call() -> None:
        gate.wait(timeout=10)
        got.append(sdk_client(info(base_url="http://127.0.0.1:9/threads"), make))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(made) == 1 and len(got) == 8 and all(client is made[0] for client in got)


def test_too_many_endpoints_of_one_sdk_start_its_set_over() -> None:
    kept = sdk_client(info(base_url="http://127.0.0.1:9/kept"), make_b)
    first = sdk_client(info(base_url="http://127.0.0.1:9/0"), make_a)
    for i in range(1, MAX_PER_SDK + 1):
        sdk_client(info(base_url=f"http://127.0.0.1:9/{i}"), make_a)
    assert sum(1 for key in _clients._clients if key[0] is make_a) <= MAX_PER_SDK
    assert sdk_client(info(base_url="http://127.0.0.1:9/0"), make_a) is not first
    assert sdk_client(info(base_url="http://127.0.0.1:9/kept"), make_b) is kept  # another SDK's clients stay


def test_the_adapters_build_their_sdk_clients_through_it() -> None:
    target = info(base_url="http://127.0.0.1:9/adapters", **{"X-Relay": "r"})
    client = sdk_client(target, openai_adapter._new_client)
    assert sdk_client(target, openai_adapter._new_client) is client
    assert type(client).__module__.startswith("openai") and client.max_retries == 0
    assert client.default_headers["X-Relay"] == "r"
    claude = sdk_client(target, anthropic_adapter._new_client)
    assert claude is not client and type(claude).__module__.startswith("anthropic")
