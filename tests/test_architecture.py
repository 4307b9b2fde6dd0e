"""The package's layering, read from the source with ``ast``: nothing outside ``molntk/cli``
imports ``molntk.cli``, and the imports among molntk modules form no cycle.

The import graph has an edge A → B when module A imports module B: at module level (the
top level and top-level ``if`` / ``try`` blocks, ``if TYPE_CHECKING:`` blocks excluded)
or, in the strict graph, anywhere (inside functions and ``TYPE_CHECKING`` blocks too: an
import deferred into a function hides a cycle, it does not remove it).
``from package import name`` is an edge to ``package.name`` when that is a module, else to
``package``; a package's ``__init__`` is the module named by the package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "molntk"


def module_name(path: Path) -> str:
    """``molntk/a/b.py`` → ``molntk.a.b``; ``molntk/a/__init__.py`` → ``molntk.a``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not is_type_checking(node.test):
                yield from module_level_imports(node.body)
            yield from module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from module_level_imports(block)


def all_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it is (functions and ``TYPE_CHECKING`` blocks too)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def imported_modules(node: ast.Import | ast.ImportFrom, importer: str) -> set[str]:
    """The molntk modules an import statement names (absolute or relative)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    return {f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names}


def parse(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(encoding="utf-8"), filename=str(MODULES[name]))


def import_graph(strict: bool = False) -> dict[str, set[str]]:
    """Module → the molntk modules it imports at module level (``strict``: anywhere)."""
    graph = {}
    for name in MODULES:
        tree = parse(name)
        targets = set()
        for node in all_imports(tree) if strict else module_level_imports(tree.body):
            targets |= {t for t in imported_modules(node, name) if t in MODULES and t != name}
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "molntk.cli.main" in graph and "molntk.cli.run" in graph["molntk.cli.main"]
    assert "molntk.pipelines.tasks" in graph["molntk.cli.run"]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


#: Modules allowed to import molntk.cli: the CLI itself and ``python -m molntk`` (which runs it).
ABOVE_CLI = {"molntk.__main__"}


@pytest.mark.parametrize(
    "name", [n for n in MODULES if not (n == "molntk.cli" or n.startswith("molntk.cli.") or n in ABOVE_CLI)]
)
def test_nothing_outside_cli_imports_cli(name: str) -> None:
    """No import of molntk.cli anywhere outside molntk/cli, not even inside a function."""
    offending = [
        f"line {node.lineno}: imports {target}"
        for node in all_imports(parse(name))
        for target in imported_modules(node, name)
        if target == "molntk.cli" or target.startswith("molntk.cli.")
    ]
    assert not offending, f"{MODULES[name]} imports the CLI: {offending}"


def test_no_import_cycles_at_module_level() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles among molntk modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycles_through_deferred_imports() -> None:
    found = cycles(import_graph(strict=True))
    assert not found, "import cycles among molntk modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def is_private(name: str) -> bool:
    """``_name`` (one leading underscore; dunders such as ``__version__`` are public)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_name_is_imported_from_another_module(name: str) -> None:
    """``from molntk.a import _x`` couples a module to another's internals: a name used
    across modules is public. (``molntk._version`` holds only the public ``__version__``.)"""
    offending = [
        f"{node.module}.{alias.name}"
        for node in all_imports(parse(name))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("molntk")
        for alias in node.names
        if is_private(alias.name) or any(is_private(part) for part in (node.module or "").split(".") if part != "_version")
    ]
    assert not offending, f"{MODULES[name]} imports private names: {offending}"


def test_private_names_are_recognised() -> None:
    assert is_private("_scatter_block") and not is_private("__version__") and not is_private("pair_sum")
