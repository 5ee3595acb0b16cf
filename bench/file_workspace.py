"""The file workspace (orbital.store.backends.files): what a durable write costs, and how long reopening takes.

1. Durable puts of small objects (fsync of the blob, of its directory, and SQLite's commit), against the same puts
   with durability off: medians of one put.
2. Reopening a directory holding `--files` objects (the index, the sweep of stray temporary files and of blobs no
   key names), then one `head`, one listing of a directory and the listing of everything.

    python bench/file_workspace.py [--files 10000] [--writes 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))


def _put_latency(root: Path, writes: int, *, durable: bool) -> float:
    from orbital.store.backends.files import FileWorkspace

    samples = []
    with FileWorkspace(root, durable=durable) as store:
        for i in range(writes):
            body = f"note {i}\n".encode() * 20
            started = time.perf_counter()
            store.put(f"agents/main/memory/{i:05d}.md", body, content_type="text/markdown")
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    from orbital.store.backends.files import FileWorkspace

    with tempfile.TemporaryDirectory() as tmp:
        durable = _put_latency(Path(tmp) / "durable", args.writes, durable=True)
        loose = _put_latency(Path(tmp) / "loose", args.writes, durable=False)
        print(f"put, median of {args.writes}: durable {durable * 1000:.2f} ms, without fsync {loose * 1000:.3f} ms")

        root = Path(tmp) / "many"
        with FileWorkspace(root, durable=False) as store:  # the same files on disk, written faster
            for i in range(args.files):
                store.put(f"agents/main/d{i % 100:02d}/f{i:05d}.md", f"file {i}".encode(), content_type="text/plain")
        started = time.perf_counter()
        store = FileWorkspace(root)
        opened = time.perf_counter() - started
        try:
            started = time.perf_counter()
            assert store.head("agents/main/d07/f00007.md") is not None
            head = time.perf_counter() - started
            started = time.perf_counter()
            top = store.listing("agents/main/")
            level = time.perf_counter() - started
            started = time.perf_counter()
            everything = store.list_all("")
            whole = time.perf_counter() - started
        finally:
            store.close()
        assert len(top.prefixes) == 100 and len(everything) == args.files
        blobs = sum(1 for p in (root / "blobs").rglob("*") if p.is_file())
        print(
            f"{args.files} objects ({blobs} blob files): reopen {opened * 1000:.1f} ms, head {head * 1000:.2f} ms, "
            f"one level (100 prefixes) {level * 1000:.1f} ms, everything {whole * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
