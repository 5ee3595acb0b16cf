"""Local backups on a real data directory (SQLite table and file workspace, opened in this process): a backup is a
consistent copy that verifies; a second one of an unchanged directory copies no blob; pruning keeps `keep` and drops
the blobs none names; what a crash leaves is cleaned; damage is found; a restore brings back what was deleted and
keeps the replaced directory aside; the engine behind `backup.status`/`backup.run`, and its schedule."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.domain.config_schema import problems_at
from orbital.errors import ConflictError
from orbital.local import backup
from orbital.local.store import LocalStore
from orbital.store import keys

SESSION = keys.session_meta("agent:main:main")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[LocalStore]:
    opened = LocalStore.open(data_dir)
    try:
        yield opened
    finally:
        opened.close()


def _fill(store: LocalStore, n: int = 5) -> None:
    store.table.put(keys.CONFIG, {"model": {"provider": "anthropic", "id": "m"}}, attrs={"v": 1})
    store.table.put(SESSION, {"title": "the session"})
    for i in range(n):
        store.table.put((f"TEST#{i}", "ITEM"), {"i": i})
        store.workspace.put(f"agents/main/notes/{i}.md", f"note {i}".encode(), content_type="text/markdown")
    store.workspace.put("agents/main/MEMORY.md", b"remember the blue door", content_type="text/markdown")


def _blobs(directory: Path) -> set[str]:
    root = directory / backup.BLOBS_DIR
    return {p.name for p in root.glob("*/*")} if root.is_dir() else set()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_backup_is_a_verified_copy_of_the_table_and_workspace(store: LocalStore, data_dir: Path) -> None:
    _fill(store)
    (data_dir / "token").write_text("the-token\n")
    directory = data_dir / "backups"
    taken = backup.take(store, data_dir, directory, keep=7)

    listed = backup.list_backups(directory)
    assert [b.name for b in listed] == [taken.info.name]
    manifest = listed[0].manifest
    assert manifest["format"] == "orbital-backup" and manifest["version"] == 1
    assert manifest["items"]["config"] == 1
    assert manifest["itemCount"] == sum(manifest["items"].values()) == len(list(store.table.scan_items()))
    assert set(manifest["objects"]) == {e.key for e in store.workspace.list_all("")}
    assert manifest["objects"]["agents/main/MEMORY.md"] == store.workspace.entry("agents/main/MEMORY.md").blob
    assert taken.new_blobs == len(set(manifest["objects"].values()))
    assert backup.verify(directory, listed[0].path, deep=True) == manifest
    assert (listed[0].path / backup.FILES_DIR / "token").read_text() == "the-token\n"
    assert not (listed[0].path / backup.FILES_DIR / "lock").exists()
    # everything private: the directory 0700, the files 0600
    assert _mode(directory) == 0o700
    for path in directory.rglob("*"):
        if path.name == backup.LOCK_FILE:
            continue
        assert _mode(path) & 0o077 == 0, path
    assert listed[0].to_json()["objects"] == len(manifest["objects"])
    assert listed[0].to_json()["verified"] is True


def test_a_second_backup_of_an_unchanged_directory_copies_no_blob(store: LocalStore, data_dir: Path) -> None:
    _fill(store)
    directory = data_dir / "backups"
    first = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_000_000)
    blobs = _blobs(directory)
    inodes = {p.name: p.stat().st_ino for p in (directory / "blobs").glob("*/*")}
    second = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_060_000)
    assert second.new_blobs == 0 and second.new_blob_bytes == 0
    assert _blobs(directory) == blobs
    assert {p.name: p.stat().st_ino for p in (directory / "blobs").glob("*/*")} == inodes
    assert second.info.manifest["objects"] == first.info.manifest["objects"]
    # one new object: one new blob
    store.workspace.put("agents/main/new.md", b"something new")
    third = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_120_000)
    assert third.new_blobs == 1
    assert [b.name for b in backup.list_backups(directory)] == [first.info.name, second.info.name, third.info.name]


def test_pruning_keeps_the_newest_and_removes_blobs_none_names(store: LocalStore, data_dir: Path) -> None:
    directory = data_dir / "backups"
    store.workspace.put("only-in-the-first", b"first bytes")
    first = backup.take(store, data_dir, directory, keep=2, now_ms=1_800_000_000_000)
    old_blob = first.info.manifest["objects"]["only-in-the-first"]
    store.workspace.delete("only-in-the-first")
    store.workspace.put("later", b"later bytes")
    backup.take(store, data_dir, directory, keep=2, now_ms=1_800_000_001_000)
    assert old_blob in _blobs(directory)  # the first backup still names it
    third = backup.take(store, data_dir, directory, keep=2, now_ms=1_800_000_002_000)
    assert third.pruned == [first.info.name]
    assert [b.name for b in backup.list_backups(directory)] == ["20270115T080001Z", "20270115T080002Z"]
    assert old_blob not in _blobs(directory)
    assert third.info.manifest["objects"]["later"] in _blobs(directory)


def test_two_backups_in_one_second_get_two_names(store: LocalStore, data_dir: Path) -> None:
    directory = data_dir / "backups"
    a = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_000_000)
    b = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_000_500)
    assert (a.info.name, b.info.name) == ("20270115T080000Z", "20270115T080000Z-2")


def test_what_a_crash_leaves_is_never_listed_and_is_cleaned(store: LocalStore, data_dir: Path) -> None:
    _fill(store)
    directory = data_dir / "backups"
    kept = backup.take(store, data_dir, directory, keep=7, now_ms=1_800_000_000_000)
    # a backup cut short: its partial directory, a blob only it had linked, a copy under way
    partial = directory / ".partial-20270115T090000Z"
    partial.mkdir()
    (partial / backup.TABLE_FILE).write_bytes(b"half a database")
    orphan = "ab" + "0" * 62
    (directory / "blobs" / "ab").mkdir(exist_ok=True)
    (directory / "blobs" / "ab" / orphan).write_bytes(b"orphan")
    (directory / "blobs" / ".copy-1-2").write_bytes(b"torn")
    assert [b.name for b in backup.list_backups(directory)] == [kept.info.name]

    assert backup.clean(directory) == (1, 1)
    assert not partial.exists()
    assert orphan not in _blobs(directory)
    assert not (directory / "blobs" / ".copy-1-2").exists()
    backup.verify(directory, kept.info.path, deep=True)


def test_damage_is_found(store: LocalStore, data_dir: Path) -> None:
    _fill(store)
    directory = data_dir / "backups"
    taken = backup.take(store, data_dir, directory, keep=7)
    path = taken.info.path
    blob = taken.info.manifest["objects"]["agents/main/MEMORY.md"]
    stored = directory / "blobs" / blob[:2] / blob
    # a blob whose bytes changed (same size): only reading it back finds it
    stored.unlink()  # it is a link to the workspace's blob: replace the backup's, not the gateway's
    stored.write_bytes(b"remember the red door!")
    assert len(b"remember the red door!") == len(b"remember the blue door")
    backup.verify(directory, path)
    with pytest.raises(backup.BackupError, match="does not hold what it was written with"):
        backup.verify(directory, path, deep=True)
    stored.unlink()
    with pytest.raises(backup.BackupError, match="is missing"):
        backup.verify(directory, path)
    # a manifest that does not match its table
    manifest = json.loads((path / backup.MANIFEST).read_text())
    manifest["items"]["config"] = 2
    (path / backup.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(backup.BackupError, match="does not hold the items"):
        backup.verify(directory, path)
    # the gateway's own blob is untouched by all this
    assert store.workspace.get("agents/main/MEMORY.md")[0] == b"remember the blue door"


def test_a_restore_brings_back_what_was_deleted_and_keeps_the_replaced_directory(data_dir: Path) -> None:
    store = LocalStore.open(data_dir)
    try:
        _fill(store)
        (data_dir / "token").write_text("token-of-then\n")
        taken = backup.take(store, data_dir, data_dir / "backups", keep=7)
        store.table.delete(SESSION)
        store.workspace.delete("agents/main/MEMORY.md")
        store.workspace.put("agents/main/after.md", b"written after the backup")
        (data_dir / "token").write_text("token-of-now\n")
        with pytest.raises(backup.BackupError, match="in use"):
            backup.restore(data_dir, data_dir / "backups", taken.info.name)
    finally:
        store.close()

    aside = backup.restore(data_dir, data_dir / "backups", taken.info.name, now=1_800_000_000)
    assert aside == data_dir.with_name("data.replaced-20270115T080000Z")
    assert (aside / "token").read_text() == "token-of-now\n"
    assert (data_dir / "token").read_text() == "token-of-then\n"
    assert _mode(data_dir) == 0o700
    # the backups stay with the data directory
    assert [b.name for b in backup.list_backups(data_dir / "backups")] == [taken.info.name]
    assert not (aside / "backups").exists()
    restored = LocalStore.open(data_dir)
    try:
        assert restored.table.get(SESSION).data == {"title": "the session"}
        assert restored.workspace.get("agents/main/MEMORY.md")[0] == b"remember the blue door"
        assert restored.workspace.get("agents/main/after.md") is None
        assert restored.workspace.get("agents/main/notes/3.md")[0] == b"note 3"
    finally:
        restored.close()
    # the replaced directory is whole: it opens, with what it had
    replaced = LocalStore.open(aside)
    try:
        assert replaced.table.get(SESSION) is None
        assert replaced.workspace.get("agents/main/after.md")[0] == b"written after the backup"
    finally:
        replaced.close()


def test_a_damaged_backup_is_not_restored(data_dir: Path) -> None:
    store = LocalStore.open(data_dir)
    try:
        _fill(store)
        taken = backup.take(store, data_dir, data_dir / "backups", keep=7)
    finally:
        store.close()
    blob = taken.info.manifest["objects"]["agents/main/notes/1.md"]
    stored = data_dir / "backups" / "blobs" / blob[:2] / blob
    stored.unlink()
    stored.write_bytes(b"note X")
    before = sorted(p.name for p in data_dir.iterdir())
    with pytest.raises(backup.BackupError, match="does not hold"):
        backup.restore(data_dir, data_dir / "backups", taken.info.name)
    assert sorted(p.name for p in data_dir.iterdir()) == before
    assert not list(data_dir.parent.glob("*.replaced-*")) and not list(data_dir.parent.glob(".data.restoring-*"))
    with pytest.raises(backup.BackupError, match="no backup"):
        backup.restore(data_dir, data_dir / "backups", "20990101T000000Z")
    with pytest.raises(backup.BackupError, match="not the name of a backup"):
        backup.restore(data_dir, data_dir / "backups", "../etc")


def test_the_settings_come_from_the_backup_section(data_dir: Path) -> None:
    assert backup.settings_of({}, data_dir) == backup.BackupSettings(0, "off", 7, data_dir / "backups")
    got = backup.settings_of({"backup": {"every": "24h", "keep": 3, "dir": "elsewhere"}}, data_dir)
    assert got == backup.BackupSettings(86_400_000, "24h", 3, data_dir / "elsewhere")
    assert backup.settings_of({"backup": {"every": "off", "dir": "/abs/dir"}}, data_dir).dir == Path("/abs/dir")
    assert backup.settings_of({"backup": {"every": "off"}}, data_dir).every_ms == 0


def test_the_schema_checks_the_backup_section() -> None:
    assert problems_at({"backup": {"every": "24h", "keep": 7, "dir": "/b"}}, "backup") == []
    assert problems_at({"backup": {"every": "off"}}, "backup") == []
    assert problems_at({"backup": {"every": "2s"}}, "backup") == []
    for bad in ({"every": "daily"}, {"every": "0"}, {"keep": 0}, {"keep": "7"}, {"dir": ""}):
        assert problems_at({"backup": bad}, "backup"), bad


def test_the_engine_answers_status_and_run(store: LocalStore, data_dir: Path) -> None:
    config = {"backup": {"every": "1h", "keep": 2}}
    engine = backup.LocalBackups(store, data_dir, lambda: config)
    status = engine.status(now_ms=1_800_000_000_000)
    assert status == {
        "available": True,
        "every": "1h",
        "keep": 2,
        "dir": str(data_dir / "backups"),
        "running": False,
        "last": None,
        "next": 1_800_000_000_000,
        "count": 0,
    }
    assert engine.due(1_800_000_000_000)
    last = engine.run(now_ms=1_800_000_000_000)
    assert last["name"] == "20270115T080000Z" and last["at"] == 1_800_000_000_000 and last["verified"] is True
    status = engine.status(now_ms=1_800_000_001_000)
    assert status["last"] == last and status["count"] == 1
    assert status["next"] == 1_800_000_000_000 + 3_600_000
    assert not engine.due(1_800_000_001_000) and engine.due(1_800_003_600_000)
    config["backup"]["every"] = "off"
    assert engine.status()["next"] is None and not engine.due(1_900_000_000_000)


def test_one_backup_at_a_time(store: LocalStore, data_dir: Path) -> None:
    engine = backup.LocalBackups(store, data_dir, dict)
    # another process holds the backup directory
    held = backup._held(data_dir / "backups")
    held.__enter__()
    try:
        with pytest.raises(ConflictError):
            engine.run()
    finally:
        held.__exit__(None, None, None)
    # a backup under way in this process
    engine._running.acquire()
    try:
        assert engine.status()["running"] is True
        with pytest.raises(ConflictError, match="already running"):
            engine.run()
    finally:
        engine._running.release()
    assert engine.run()["verified"] is True


def test_the_schedule_takes_backups_and_prunes(store: LocalStore, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(backup, "POLL_S", 0.05)
    engine = backup.LocalBackups(store, data_dir, lambda: {"backup": {"every": "1s", "keep": 2}})
    taken: list[str] = []
    done = threading.Event()
    real_take = engine.take

    def counting_take(**kwargs):
        result = real_take(**kwargs)
        taken.append(result.info.name)
        if len(taken) >= 3:
            done.set()
        return result

    monkeypatch.setattr(engine, "take", counting_take)
    engine.start()
    try:
        assert done.wait(30)
    finally:
        engine.stop()
    names = [b.name for b in backup.list_backups(data_dir / "backups")]
    assert len(names) == 2 and names == sorted(taken)[-2:]
    assert not os.path.exists(data_dir / "backups" / f".partial-{taken[-1]}")


def test_an_existing_backup_directory_keeps_its_mode_and_what_is_written_is_private(
    store: LocalStore, data_dir: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    taken = backup.take(store, data_dir, shared, keep=7)
    assert _mode(shared) == 0o755
    assert _mode(shared / "blobs") == 0o700 and _mode(taken.info.path) == 0o700
    assert _mode(taken.info.path / backup.MANIFEST) == 0o600
    with pytest.raises(backup.BackupError, match="cannot be the data directory"):
        backup.take(store, data_dir, data_dir, keep=7)
