"""The package's layout rules, checked on the source so they cannot erode (docs/adr/0031-layers.md).

The layers and the absence of import cycles are import-linter's contracts (`[tool.importlinter]` in pyproject.toml,
run by `make lint`). This checks what the tool does not:

- the README's Layout names the contract's layers, in the contract's order;
- imports under `if TYPE_CHECKING:` count (the option that leaves them out is not set), and every import the
  contracts ignore is made only there: a name in an annotation, never a dependency at run time. Both contracts
  ignore the same imports;
- the graph the contracts are checked on holds the imports inside functions and under `TYPE_CHECKING`;
- an import of an `orbital` module inside a function says why it is lazy (a comment on it or above its block);
- the Lambda entry points (`functions/`, outside the package) are thin: they reach the gateway through the runtime
  or the HTTP app, which take their Services from the composition root (`orbital.runtime.services`);
- no function is over 80 lines and no module over 800, but those allowed, each for a reason
  (docs/adr/0052-size-limits.md);
- the package root holds only the package's face; no import is placed after code (`noqa: E402`).
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grimp
import orbital
import pytest

PACKAGE = Path(orbital.__file__).resolve().parent
LAYER = PACKAGE.parents[0]
ROOT = LAYER.parents[1]
ROOT_MODULES = {"__init__.py", "settings.py", "errors.py", "observability.py", "client.py"}
NOQA_E402 = re.compile(r"noqa\s*:[^\n]*\bE402\b", re.IGNORECASE)
DATA_DIRS = {"seed", "console"}
"""Folders of the package that hold data, not modules (no layer)."""


def _linter() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]


def _contract(kind: str) -> dict[str, Any]:
    found = [c for c in _linter()["contracts"] if c["type"] == kind]
    assert len(found) == 1, f"expected one {kind} contract, found {len(found)}"
    return found[0]


def _layer_names() -> list[str]:
    """The layers contract's modules, highest first (the names of one layer in their written order)."""
    return [name.strip() for layer in _contract("layers")["layers"] for name in re.split(r"[|:]", layer)]


def _ignored(contract: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = [tuple(part.strip() for part in entry.split("->")) for entry in contract.get("ignore_imports", [])]
    assert all(len(p) == 2 for p in pairs), pairs
    return [(p[0], p[1]) for p in pairs]


@pytest.fixture(scope="module")
def graphs() -> tuple[grimp.ImportGraph, grimp.ImportGraph]:
    """The import graph as the contracts see it, and the same without the imports under `TYPE_CHECKING`."""
    return (
        grimp.build_graph("orbital", cache_dir=None),
        grimp.build_graph("orbital", cache_dir=None, exclude_type_checking_imports=True),
    )


# --- the contract -------------------------------------------------------------------------------------------------


def test_the_layers_contract_places_every_subpackage_and_counts_type_checking_imports() -> None:
    layers = _contract("layers")
    assert layers["containers"] == ["orbital"]
    assert layers["exhaustive"] is True, "a subpackage missing from the layers would go unchecked"
    assert not _linter().get("exclude_type_checking_imports", False), "imports under TYPE_CHECKING must count"
    assert _contract("acyclic_siblings")["ancestors"] == ["orbital"]


def test_the_readme_lists_the_layers_of_the_contract_in_order() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    names: list[str] = []
    inside = False
    for line in block.splitlines():
        if line.startswith("layers/orbital/orbital/"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        if not inside or not line.startswith("  ") or line.startswith("   "):
            continue  # a description's next line
        for token in line.split():
            match = re.fullmatch(r"([a-z_]+)(?:/|\.py)", token)
            if match is None:
                break
            names.append(match[1])
    assert [n for n in names if n not in DATA_DIRS] == _layer_names()


def test_every_ignored_import_is_made_only_under_type_checking(
    graphs: tuple[grimp.ImportGraph, grimp.ImportGraph],
) -> None:
    full, at_run_time = graphs
    for importer, imported in _ignored(_contract("layers")):
        assert full.direct_import_exists(importer=importer, imported=imported), f"{importer} -> {imported}: gone"
        assert not at_run_time.direct_import_exists(importer=importer, imported=imported), (
            f"{importer} imports {imported} at run time, not only under TYPE_CHECKING: it breaks the layers"
        )


def test_both_contracts_ignore_the_same_imports() -> None:
    assert sorted(_ignored(_contract("layers"))) == sorted(_ignored(_contract("acyclic_siblings")))


def test_the_graph_holds_imports_inside_functions_and_under_type_checking(
    graphs: tuple[grimp.ImportGraph, grimp.ImportGraph],
) -> None:
    full, at_run_time = graphs
    # `orbital.methods.registry()` imports the families inside the function
    assert full.direct_import_exists(importer="orbital.methods", imported="orbital.methods.connect")
    assert at_run_time.direct_import_exists(importer="orbital.methods", imported="orbital.methods.connect")
    # the registry's signatures name Services under TYPE_CHECKING only
    assert full.direct_import_exists(importer="orbital.protocol.registry", imported="orbital.ports.services")
    assert not at_run_time.direct_import_exists(importer="orbital.protocol.registry", imported="orbital.ports.services")


# --- lazy imports -------------------------------------------------------------------------------------------------


def _orbital_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == "orbital"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "orbital" for a in node.names)


def _imports_in_functions(tree: ast.AST) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import | ast.ImportFrom) and _orbital_import(child):
                found.append(child)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return found


def lazy_imports_without_reason(source: str) -> list[int]:
    """Lines of imports of `orbital` modules inside functions with no comment saying why: none on the statement, on
    the import lines right above it (its block), or on a comment line right above that block."""
    lines = source.splitlines()
    tree = ast.parse(source)
    import_lines = {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    missing = []
    for node in _imports_in_functions(tree):
        first, last = node.lineno, node.end_lineno or node.lineno
        while first - 1 in import_lines:
            first -= 1
        said = any("#" in lines[n - 1] for n in range(first, last + 1))
        above = lines[first - 2].strip() if first >= 2 else ""
        if not said and not above.startswith("#"):
            missing.append(node.lineno)
    return missing


def test_the_lazy_import_check_wants_a_reason() -> None:
    source = (
        "def f():\n    from orbital.x import y\n\n"
        "def g():\n    from orbital.x import y  # lazy: why\n\n"
        "def h():\n    # lazy: why\n    from orbital.x import y\n    from orbital.z import w\n\n"
        "def i():\n    import json\n"
    )
    assert lazy_imports_without_reason(source) == [2]


def test_every_lazy_import_says_why() -> None:
    offenders = [
        f"{path.relative_to(LAYER)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
        for number in lazy_imports_without_reason(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        "an import inside a function either moves to the module's imports or says why it is lazy "
        f"(a one-line comment: the cold start it keeps small, ...): {offenders}"
    )


# --- the Lambda entry points ---------------------------------------------------------------------------------------

ENTRY_POINT_IMPORTS = re.compile(r"orbital\.(observability|runtime\.[a-z_]+|rest\.app|ports\.invocation)(\.\w+)?")
"""What a function under functions/ may import from the package: the runtime's handlers, the HTTP app, what the
invocation has left (its Lambda context), and the logger, metrics and tracer."""


def test_every_lambda_entry_point_goes_through_the_runtime() -> None:
    entry_points = sorted((ROOT / "functions").glob("*/*.py"))
    assert len([p for p in entry_points if p.name != "__init__.py"]) >= 8
    for path in entry_points:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orbital"):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    assert ENTRY_POINT_IMPORTS.fullmatch(name), f"{path.relative_to(ROOT)}: {name}"
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("orbital") for a in node.names), path.relative_to(ROOT)


# --- size limits --------------------------------------------------------------------------------------------------

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800
OVERSIZED: dict[str, str] = {
    # being split by other changes: each goes when the change that shrinks it is in
    "agent/runs.py:submit": "being split by other changes",
    "local/bridge.py:Bridge._websocket": "being split by other changes",
}
"""What may stay over the limits, each with its reason (recorded in docs/adr/0052-size-limits.md): a module as its
path under the package, a function as `path:qualified.name`."""
SIZE_ADR = ROOT / "docs" / "adr" / "0052-size-limits.md"


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of a module, by qualified name (`Class.method`, `outer.inner`)."""
    todo: list[tuple[str, ast.AST]] = [("", tree)]
    while todo:
        prefix, parent = todo.pop()
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{node.name}"
                if not isinstance(node, ast.ClassDef):
                    yield name, node
                todo.append((f"{name}.", node))
            else:
                todo.append((prefix, node))


def _oversized() -> dict[str, int]:
    """Every module over `MAX_MODULE_LINES` and function over `MAX_FUNCTION_LINES` in the package, with its size."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found[where] = lines
        for name, node in _functions(ast.parse(text)):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_FUNCTION_LINES:
                found[f"{where}:{name}"] = size
    return found


def test_no_function_or_module_is_over_its_size_limit() -> None:
    over = {name: size for name, size in _oversized().items() if name not in OVERSIZED}
    assert not over, (
        f"over {MAX_FUNCTION_LINES} lines a function, {MAX_MODULE_LINES} a module: split them along what they do "
        f"(or allow one in OVERSIZED, with its reason in {SIZE_ADR.name}): {over}"
    )


def test_the_size_allow_list_holds_only_what_is_over_and_says_why() -> None:
    over = _oversized()
    stale = sorted(name for name in OVERSIZED if name not in over)
    assert not stale, f"no longer over the limit: take them out of OVERSIZED (and {SIZE_ADR.name}): {stale}"
    adr = SIZE_ADR.read_text(encoding="utf-8")
    unexplained = sorted(name for name, reason in OVERSIZED.items() if not reason or f"`{name}`" not in adr)
    assert not unexplained, f"every allowed one is named, with its reason, in {SIZE_ADR.name}: {unexplained}"


def test_the_size_check_counts_methods_and_nested_functions() -> None:
    body = "\n".join(f"        x{n} = {n}" for n in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"class A:\n    def big(self):\n{body}\n\n    def small(self):\n        pass\n")
    sizes = {name: (node.end_lineno or 0) - node.lineno + 1 for name, node in _functions(tree)}
    assert sizes["A.big"] == MAX_FUNCTION_LINES + 1 and sizes["A.small"] == 2


# --- the package root, imports after code -------------------------------------------------------------------------


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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LAYER).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(module: str, tree: ast.AST, is_package: bool) -> dict[str, str]:
    """The module's bindings of imported names: local name -> dotted name it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def classes_in(sources: dict[str, tuple[str, bool]]) -> dict[str, list[str]]:
    """Every class of the given modules (name -> (source, is package)): dotted name -> its bases, as dotted names
    (a library's base as it is imported, a builtin as `builtins.X`)."""
    found: dict[str, list[str]] = {}
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source)
        imported = _imported_names(module, tree, is_package)
        local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = []
            for base in node.bases:
                text = ast.unparse(base.value if isinstance(base, ast.Subscript) else base)
                head, _, rest = text.partition(".")
                if head in local and not rest:
                    bases.append(f"{module}.{head}")
                elif head in imported:
                    bases.append(imported[head] + (f".{rest}" if rest else ""))
                else:
                    bases.append(f"builtins.{text}")
            found[f"{module}.{node.name}"] = bases
    return found


def exception_classes(classes: dict[str, list[str]]) -> set[str]:
    """The classes that derive from BaseException, through the package's own classes and the libraries'."""
    memo: dict[str, bool] = {}

    def is_exception(name: str) -> bool:
        if name not in memo:
            memo[name] = False
            if name in classes:
                memo[name] = any(is_exception(base) for base in classes[name])
            else:
                module, _, attr = name.rpartition(".")
                try:
                    value = getattr(importlib.import_module(module), attr)
                except (ImportError, AttributeError):
                    value = None
                memo[name] = isinstance(value, type) and issubclass(value, BaseException)
        return memo[name]

    return {name for name in classes if is_exception(name)}


def _package_sources() -> dict[str, tuple[str, bool]]:
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in PACKAGE.rglob("*.py")
    }


def test_the_class_checks_see_exceptions_through_bases() -> None:
    classes = classes_in(
        {
            "pkg.a": ("import json\nclass Base(ValueError): ...\nclass Broken(json.JSONDecodeError): ...", False),
            "pkg.b": ("from .a import Base\nclass Refused(Base): ...\nclass Plain: ...", False),
        }
    )
    assert exception_classes(classes) == {"pkg.a.Base", "pkg.a.Broken", "pkg.b.Refused"}


def test_every_exception_class_name_ends_in_error() -> None:
    classes = classes_in(_package_sources())
    wrong = sorted(name for name in exception_classes(classes) if not name.rsplit(".", 1)[1].endswith("Error"))
    assert not wrong, f"exception classes whose name does not end in Error: {wrong}"


def test_no_two_classes_share_a_name() -> None:
    by_name: dict[str, list[str]] = {}
    for name in classes_in(_package_sources()):
        by_name.setdefault(name.rsplit(".", 1)[1], []).append(name)
    shared = {name: where for name, where in by_name.items() if len(where) > 1}
    assert not shared, f"classes that share a name: {shared}"
