"""Print the layer's Python files that the Lambda entry points import: at start, and on the first request's path
(the method registry, the agent turn, the HTTP app). One path a line, relative to the layer's `python/` directory.

The layer ships bytecode for exactly these files (layers/orbital/Makefile): Lambda cannot write `__pycache__` into a
layer, so without it every cold start compiles them again. Only files of the orbital package and of the
distributions pinned in layers/orbital/requirements.txt are listed. `make hot-modules` rewrites
layers/orbital/hot-modules.txt; a test fails when it is out of date.

    python scripts/layer_hot_modules.py > layers/orbital/hot-modules.txt
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER = ROOT / "layers" / "orbital"


def _pinned() -> set[str]:
    names = set()
    for line in (LAYER / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==", line.strip())
        if match:
            names.add(re.sub(r"[-_.]+", "-", match[1]).lower())
    return names


def main() -> None:
    sys.path[:0] = [str(LAYER), str(ROOT)]
    for entry in sorted(p.name for p in (ROOT / "functions").iterdir() if (p / f"{p.name}.py").is_file()):
        importlib.import_module(f"functions.{entry}.{entry}")
    from orbital import methods
    from orbital.rest import app

    methods.registry()
    importlib.import_module("orbital.agent.turn")
    app.create_app()

    pinned = _pinned()
    owners = importlib.metadata.packages_distributions()
    files: set[str] = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        file = Path(path).resolve()
        if file.is_relative_to(LAYER / "orbital"):
            files.add(file.relative_to(LAYER).as_posix())
            continue
        top = module.__name__.split(".")[0]
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in owners.get(top, [])}
        if not dists & pinned:
            continue
        for base in map(Path, sys.path):
            if base.is_dir() and file.is_relative_to(base.resolve()) and "site-packages" in base.parts:
                files.add(file.relative_to(base.resolve()).as_posix())
                break
    print("\n".join(sorted(files)))


if __name__ == "__main__":
    main()
