"""The two bounded caches of the agent's reads (cachetools' LRUCache): the workspace files of the system prompt
(`orbital.agent.context.files`) and the images inlined into model requests (`orbital.agent.media`). Each is bounded
by the characters it holds, drops the least recently used first, keeps nothing larger than the whole bound, and
answers a repeated read without the workspace. Over a real file workspace."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.agent import context, media
from orbital.store.backends.files import FileWorkspace


class CountingWorkspace(FileWorkspace):
    """A file workspace that counts the objects read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def _get(self, key: str) -> Any:
        self.reads.append(key)
        return super()._get(key)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Any]:
    with CountingWorkspace(tmp_path / "objects") as workspace:
        yield SimpleNamespace(workspace=workspace, settings=SimpleNamespace(bucket_name="b"))


def test_workspace_files_are_read_once_until_they_change(services: Any) -> None:
    cache = context._FileCache(limit=10)
    services.workspace.put("a", b"aaaa")
    info = services.workspace.head("a")
    assert cache.text(services, info) == "aaaa"
    assert cache.text(services, info) == "aaaa"
    assert services.workspace.reads == ["a"]
    services.workspace.put("a", b"AAAAA")  # a new version: another size, another stamp
    assert cache.text(services, services.workspace.head("a")) == "AAAAA"
    assert services.workspace.reads == ["a", "a"]


def test_workspace_files_past_the_bound_drop_the_least_recently_used(services: Any) -> None:
    cache = context._FileCache(limit=10)
    for key, body in (("a", b"aaaa"), ("b", b"bbbb"), ("big", b"x" * 11)):
        services.workspace.put(key, body)
    a, b, big = (services.workspace.head(k) for k in ("a", "b", "big"))
    cache.text(services, a)
    cache.text(services, b)
    cache.text(services, a)  # b is now the least recently used
    services.workspace.put("c", b"cccc")
    cache.text(services, services.workspace.head("c"))  # 12 characters: b goes
    services.workspace.reads.clear()
    cache.text(services, a)
    cache.text(services, b)
    assert services.workspace.reads == ["b"]
    assert cache.text(services, big) == "x" * 11  # larger than the bound: read, never kept
    assert cache.text(services, big) == "x" * 11
    assert services.workspace.reads == ["b", "big", "big"]


@pytest.fixture
def small_media_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The images' cache made afresh with a bound of 16 characters (the module's is 50 MB)."""
    monkeypatch.setattr(media, "CACHE_BYTES", 16)
    monkeypatch.setattr(media, "_made", None)


def test_images_are_read_once_and_bounded(services: Any, small_media_cache: None) -> None:
    for key, body in (("i1", b"123456"), ("i2", b"abcdef"), ("big", b"x" * 13)):
        services.workspace.put(key, body)
    assert media._load(services, "i1") == base64.b64encode(b"123456").decode()  # 8 characters of base64
    assert media._load(services, "i1") == base64.b64encode(b"123456").decode()
    media._load(services, "i2")  # 16 in all: both kept
    media._load(services, "i1")
    media._load(services, "i2")
    assert services.workspace.reads == ["i1", "i2"]
    assert media._load(services, "big") == base64.b64encode(b"x" * 13).decode()  # 20 characters: never kept
    media._load(services, "big")
    assert services.workspace.reads == ["i1", "i2", "big", "big"]
    assert media._load(services, "missing") is None
