"""The house rules, read from the code's imports: packages are layers, imports point down them, nothing imports
in a circle, no module takes another's private name, and SQL is spoken only in storage/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dedupdb"

# From the bottom up: a module may import from its own layer and the layers below it, never above.
LAYERS = [
    {"dedupdb.errors", "dedupdb.config", "dedupdb.jit", "dedupdb.compiled"},
    {"dedupdb.text"},
    {"dedupdb.sketch"},
    {"dedupdb.storage"},
    {"dedupdb.index"},
    {"dedupdb.ingest"},
    {"dedupdb.database"},
    {"dedupdb.ops"},
    {"dedupdb.scaleout"},
    {"dedupdb.cli", "dedupdb.__main__"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int | None:
    for level, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    return None


def _imports(module: str) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) of every import in the file, at any depth: those for
    annotations only (under TYPE_CHECKING) count too, as a layer names nothing above it."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names if alias.name.startswith("dedupdb")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("dedupdb"):
                continue
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            out += [(s, [], node.lineno) for s in submodules]
            out.append((target, [n for n in names if f"{target}.{n}" not in MODULES], node.lineno))
    return out


def _resolve(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def test_every_module_has_a_layer():
    assert [m for m in MODULES if m != "dedupdb" and _layer(m) is None] == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "dedupdb"))
def test_imports_point_down_the_layers(module):
    mine = _layer(module)
    upward = [
        f"line {line}: {target}" for target, _, line in _imports(module)
        if target != "dedupdb" and (_layer(target) or 0) > mine
    ]
    assert upward == [], f"{module} imports from a layer above its own"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module(module):
    private = [
        f"line {line}: {target}.{name}" for target, names, line in _imports(module) for name in names
        if name.startswith("_") and not name.startswith("__") and _resolve(target) != module
    ]
    assert private == []


def test_nothing_imports_in_a_circle():
    graph = {m: {_resolve(t) for t, _, _ in _imports(m)} - {None, m, "dedupdb"} for m in MODULES}
    # A package's __init__ importing its own modules is how a package shows its names, not a circle.
    graph = {m: {t for t in targets if not (t.startswith(m + ".") and MODULES[m].name == "__init__.py")}
             for m, targets in graph.items()}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []


_SQL = re.compile(r"""["'](\s*)(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|BEGIN|COMMIT|ROLLBACK)\b""")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("dedupdb.storage")))
def test_sql_is_spoken_only_in_storage(module):
    text = MODULES[module].read_text(encoding="utf-8")
    assert not _SQL.search(text), f"{module} holds SQL: it belongs in dedupdb/storage/"
