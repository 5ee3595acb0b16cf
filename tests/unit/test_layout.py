"""The package's layout rules (docs/adr/0007-layout-and-hooks.md), checked on the source so they cannot erode.

- Module-level imports between `orbital` modules form no cycle: a cycle is what forces wiring by import side
  effect and `# noqa: E402` imports placed after the code that needs them. Imports inside functions and inside
  `if TYPE_CHECKING:` are left out: they run late or never, so they cannot deadlock an import.
- The package root holds only the package's face; everything else lives in a subpackage named for its role.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import orbital

PACKAGE = Path(orbital.__file__).resolve().parent
LAYER = PACKAGE.parents[0]
ROOT_MODULES = {"__init__.py", "settings.py", "errors.py", "observability.py", "client.py"}
NOQA_E402 = re.compile(r"noqa\s*:[^\n]*\bE402\b", re.IGNORECASE)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LAYER).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported: not in functions, not under TYPE_CHECKING."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_imports(node.body)
            yield from _import_time_imports(node.orelse)
        elif isinstance(node, ast.ClassDef | ast.With):
            yield from _import_time_imports(node.body)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_imports(block)


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph() -> dict[str, set[str]]:
    """Module -> the `orbital` modules it imports at import time."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_time_imports(tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, path, node)
                # `from pkg import sub` imports the submodule when there is one, else a name from `pkg`
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_import_time_imports_only() -> None:
    graph = import_graph()
    # a module-level import is an edge; one inside a function (methods.registry()'s includes) is not
    assert "orbital.protocol.registry" in graph["orbital.methods"]
    assert "orbital.methods.connect" not in graph["orbital.methods"]


def test_module_level_imports_form_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_package_root_holds_only_its_face() -> None:
    extra = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ROOT_MODULES)
    assert not extra, f"move these into a subpackage named for their role: {extra}"


def test_no_import_placed_after_code() -> None:
    offenders = [
        f"{path.relative_to(LAYER)}:{number}"
        for path in sorted(LAYER.rglob("*.py"))
        if "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NOQA_E402.search(line)
    ]
    assert not offenders, f"imports after code (noqa: E402): {offenders}"
