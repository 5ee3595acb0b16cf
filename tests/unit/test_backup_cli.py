"""`orbital backup now|list|restore` on a data directory no gateway runs on, in process: the parser, its refusals,
a backup taken by the command itself, listing (also as JSON, and with --verify finding damage), and a restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from orbital.cli.main import build_parser, main
from orbital.local.store import LocalStore


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    store = LocalStore.open(path)
    try:
        store.workspace.put("agents/main/MEMORY.md", b"remember")
        store.table.put(("TEST#1", "ITEM"), {"x": 1})
    finally:
        store.close()
    return path


def test_the_parser() -> None:
    args = build_parser().parse_args(["backup", "restore", "20261128T230512Z", "--data-dir", "/d"])
    assert (args.action, args.name, args.data_dir) == ("restore", "20261128T230512Z", "/d")
    assert build_parser().parse_args(["backup", "now"]).action == "now"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["backup", "later"])


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backup", "restore", "--data-dir", str(tmp_path)]) == 1
    assert "restore needs the NAME" in capsys.readouterr().err
    assert main(["backup", "now", "extra", "--data-dir", str(tmp_path)]) == 1
    assert "takes no NAME" in capsys.readouterr().err
    assert main(["backup", "now", "--data-dir", str(tmp_path / "nowhere")]) == 1
    assert "no such data directory" in capsys.readouterr().err
    assert main(["backup", "restore", "20261128T230512Z", "--data-dir", str(tmp_path)]) == 1
    assert "no backup 20261128T230512Z" in capsys.readouterr().err


def test_now_list_and_restore(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backup", "list", "--data-dir", str(data_dir)]) == 0
    assert "No backups in" in capsys.readouterr().out
    assert main(["backup", "now", "--data-dir", str(data_dir), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["objects"] == 1 and made["verified"] is True
    assert main(["backup", "list", "--data-dir", str(data_dir), "--json", "--verify"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["dir"] == str(data_dir / "backups") and [b["name"] for b in listed["backups"]] == [made["name"]]

    # the command took the data directory for its time only: it opens again
    LocalStore.open(data_dir).close()
    assert main(["backup", "restore", made["name"], "--data-dir", str(data_dir), "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert Path(restored["replaced"]).is_dir() and restored["restored"] == made["name"]
    store = LocalStore.open(data_dir)
    try:
        assert store.workspace.get("agents/main/MEMORY.md")[0] == b"remember"
    finally:
        store.close()


def test_list_verify_finds_damage(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = data_dir.parent / "elsewhere"
    assert main(["backup", "now", "--data-dir", str(data_dir), "--dir", str(elsewhere)]) == 0
    assert "taken of" in capsys.readouterr().out
    blob = next(elsewhere.glob("blobs/*/*"))
    blob.unlink()
    blob.write_bytes(b"rememBer")
    assert main(["backup", "list", "--data-dir", str(data_dir), "--dir", str(elsewhere)]) == 0
    capsys.readouterr()
    assert main(["backup", "list", "--data-dir", str(data_dir), "--dir", str(elsewhere), "--verify"]) == 1
    assert "DAMAGED" in capsys.readouterr().out
