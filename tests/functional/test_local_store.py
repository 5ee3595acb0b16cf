"""The local gateway's data directory (`orbital.local.store`): one process at a time, a temporary store that leaves
nothing behind, and a directory written by an earlier version converted once (`orbital.local.upgrade`), from a clean
stop and from a crash."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from orbital.local.store import DataDirLockedError, LocalStore
from orbital.local.upgrade import holds_earlier_state, read_earlier_state
from orbital.ports.services import Services
from orbital.runtime.services import build_services
from orbital.settings import Settings
from orbital.store import keys

EARLIER = Path(__file__).parents[1] / "data" / "journal-era-data-dirs.tar.gz"
"""Two data directories the journal-era gateway wrote (config with a model and an API key, a cron job, workspace
files `notes/a.md` and `notes/a.md.d/b.md`): `stopped` (SIGINT: a checkpoint) and `killed` (SIGKILL after
acknowledged writes: only the journal)."""


def _unpack(tmp_path: Path) -> Path:
    with tarfile.open(EARLIER) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path


def _services(store: LocalStore) -> Services:
    return build_services(Settings(), table=store.table, workspace=store.workspace)


def test_one_process_per_data_directory(tmp_path: Path) -> None:
    store = LocalStore.open(tmp_path / "data")
    try:
        with pytest.raises(DataDirLockedError, match="in use by another Orbital gateway"):
            LocalStore.open(tmp_path / "data")
        beside = LocalStore.open(tmp_path / "data", exclusive=False)  # a tool next to the running gateway
        store.table.put(("T#x", "a"), {"v": 1})
        assert beside.table.get(("T#x", "a")).data == {"v": 1}
        beside.close()
    finally:
        store.close()
    LocalStore.open(tmp_path / "data").close()  # free again once closed


def test_a_temporary_store_leaves_nothing(tmp_path: Path) -> None:
    store = LocalStore.open(tmp_path / "data", temporary=True)
    store.table.put(("T#x", "a"), {"v": 1})
    store.workspace.put("k", b"body")
    root = store.root
    assert root.exists() and root != tmp_path / "data"
    store.close()
    assert not root.exists()


@pytest.mark.parametrize("name", ["stopped", "killed"])
def test_an_earlier_data_directory_is_converted_once(tmp_path: Path, name: str) -> None:
    data_dir = _unpack(tmp_path) / name
    assert holds_earlier_state(data_dir)
    before = read_earlier_state(data_dir)
    assert before.torn_bytes == 0 and before.missing_blobs == 0

    store = LocalStore.open(data_dir)
    try:
        assert "converted a data directory written by an earlier version" in store.describe()
        services = _services(store)
        config = services.config.effective()
        assert config["model"]["id"] == "claude-legacy"
        assert config["apiKeys"]["anthropic"] == "sk-legacy-secret"
        note = store.workspace.get(keys.workspace_object("main", "notes/a.md"))
        assert note is not None and note[0] == f"# {name}\nhello from the old format\n".encode()
        assert note[1].content_type == before.objects[keys.workspace_object("main", "notes/a.md")].content_type
        nested = store.workspace.get(keys.workspace_object("main", "notes/a.md.d/b.md"))
        assert nested is not None and nested[0] == b"nested"  # a key and a key below it, both kept
        items = {(i["PK"]["S"], i["SK"]["S"]): i for i in store.table.scan_items()}
        assert set(items) == set(before.items)
        assert all(items[key] == item for key, item in before.items.items())  # every attribute as it was
        jobs = [key for key in items if key[0] == "CRON" and key[1].startswith("JOB#")]
        assert len(jobs) == 1
    finally:
        store.close()
    assert not holds_earlier_state(data_dir)
    assert [p.name for p in data_dir.iterdir() if p.name.startswith("state.upgraded-")]  # kept aside, not deleted

    again = LocalStore.open(data_dir)  # nothing left to convert: opened as it is
    try:
        assert "converted" not in again.describe()
        assert _services(again).config.effective()["model"]["id"] == "claude-legacy"
    finally:
        again.close()


def test_a_torn_journal_tail_is_left_out(tmp_path: Path) -> None:
    data_dir = _unpack(tmp_path) / "killed"
    journal = next((data_dir / "state").glob("journal-*.log"))
    intact = read_earlier_state(data_dir)
    with journal.open("ab") as fh:
        fh.write(b"\x00\x00\x01\x00garbage")  # a record cut short by the crash
    torn = read_earlier_state(data_dir)
    assert torn.torn_bytes == 11
    assert torn.items == intact.items and set(torn.objects) == set(intact.objects)
    store = LocalStore.open(data_dir)
    try:
        assert "torn tail of 11 bytes" in store.describe()
    finally:
        store.close()
