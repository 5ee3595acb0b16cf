"""Fixtures for agent runs executed in moto: the scripted model server and a client configured to use it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fake_llm import FakeLLM


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def agent(flows: Any, connect: Any, llm: FakeLLM) -> Any:
    admin = connect("client", "admin")
    admin.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-test"}})
    admin.call("config.set", {"path": "providers", "value": {"openai": {"baseUrl": f"{llm.base_url}/v1"}}})
    admin.call("config.set", {"path": "apiKeys.openai", "value": "sk-test-key"})
    return admin
