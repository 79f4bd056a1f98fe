#!/usr/bin/env python3
"""Import circles and layering of Eddy's packages (see docs/DESIGN.md): exits 1 on either.

    import_cycles.py [PACKAGE_DIR ...]     (default: the contract, operator and runtime packages)

Every import counts: module level, inside functions, under ``if TYPE_CHECKING:``, in ``try``.
``from pkg import mod`` is an import of ``pkg.mod`` when that is a module, else of ``pkg`` (a
package's ``__init__`` is a module of its own). Each circle is printed as its strongly connected
component, with every import inside it as ``file:line``. Layering: ``eddy_contract`` imports
neither ``eddy_operator`` nor ``eddy_runtime``, and those two do not import each other; inside a
package listed in ``LAYERS``, each sub-package imports only the sub-packages the table allows it
(docs/DESIGN.md, "Layout"), and no sub-package imports a module that sits directly in the
package (such as ``eddy_runtime.cli``, the top).
Standard library only; reads the files, imports nothing.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PACKAGES = ("contract/eddy_contract", "operator/eddy_operator", "runtime/eddy_runtime")

#: top-level package -> the top-level packages it must not import
FORBIDDEN: dict[str, frozenset[str]] = {
    "eddy_contract": frozenset({"eddy_operator", "eddy_runtime"}),
    "eddy_operator": frozenset({"eddy_runtime"}),
    "eddy_runtime": frozenset({"eddy_operator"}),
}

_BELOW_DSL = frozenset({"kafka", "state"})
_SHARED = frozenset({"kafka", "state", "dsl", "queries", "protocol", "processing"})

#: package -> its sub-packages -> the sibling sub-packages each may import (lowest first). The
#: driver and the executor are two processes: neither imports the other.
LAYERS: dict[str, dict[str, frozenset[str]]] = {
    "eddy_runtime": {
        "kafka": frozenset(),
        "state": frozenset({"kafka"}),
        "dsl": _BELOW_DSL,
        "queries": _BELOW_DSL | {"dsl"},
        "protocol": _BELOW_DSL | {"dsl", "queries"},
        "processing": _BELOW_DSL | {"dsl", "queries", "protocol"},
        "executor": _SHARED,
        "driver": _SHARED,
        "local": _SHARED | {"driver"},
    },
}


@dataclass(frozen=True, order=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (or the closest name an import resolves to)
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.source} -> {self.target}"


def modules_of(package_dir: Path) -> dict[str, Path]:
    """Module name -> file for every ``.py`` under ``package_dir`` (its name is the package's)."""
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The longest prefix of ``name`` that is a known module, else ``name`` itself."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return name


def imports_of(module: str, path: Path, known: dict[str, Path], shown: Path) -> list[Edge]:
    """Every import in one file, wherever it sits, resolved to a module name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name, known) for a in node.names]
        else:
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(p for p in [*base_parts, node.module or ""] if p)
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else _resolve(base, known))
        for target in targets:
            if target != module:
                edges.append(Edge(module, target, str(shown), node.lineno))
    return edges


def build_graph(package_dirs: Iterable[Path], relative_to: Path | None = None) -> list[Edge]:
    """All import edges of the given packages (edges to outside modules included)."""
    dirs = list(package_dirs)
    known: dict[str, Path] = {}
    for d in dirs:
        known.update(modules_of(d))
    edges: list[Edge] = []
    for module, path in sorted(known.items()):
        shown = path
        if relative_to is not None and path.is_relative_to(relative_to):
            shown = path.relative_to(relative_to)
        edges.extend(imports_of(module, path, known, shown))
    return edges


def cycles(edges: Sequence[Edge], modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    graph: dict[str, list[str]] = {m: [] for m in sorted(modules)}
    for e in edges:
        if e.source in modules and e.target in modules and e.target not in graph[e.source]:
            graph[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            successors = graph[node]
            if i < len(successors):
                work.append((node, i + 1))
                nxt = successors[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _sub_package_rule(edge: Edge) -> str | None:
    """Why an import between two parts of one ``LAYERS`` package breaks its layering, else None."""
    source, target = edge.source.split("."), edge.target.split(".")
    layers = LAYERS.get(source[0])
    if layers is None or target[0] != source[0] or len(source) < 3 or source[1] == target[1]:
        return None  # another package, or a module directly in the package (the top), or within one
    here = f"{source[0]}.{source[1]}"
    if source[1] not in layers:
        return f"{here} is not in the layering table"
    if len(target) < 2:
        return f"{here} must not import {target[0]}"
    there = f"{target[0]}.{target[1]}"
    if target[1] not in layers and len(target) == 2 and edge.target.count(".") == 1:
        return f"{here} must not import {there}, a module of the top"
    if target[1] not in layers[source[1]]:
        return f"{here} must not import {there}"
    return None


def layering_rule(edge: Edge) -> str | None:
    """The rule an import breaks, else None."""
    source, target = edge.source.split(".")[0], edge.target.split(".")[0]
    if target in FORBIDDEN.get(source, frozenset()):
        return f"{source} must not import {target}"
    return _sub_package_rule(edge)


def layering_breaches(edges: Sequence[Edge]) -> list[Edge]:
    return sorted({e for e in edges if layering_rule(e) is not None})


def check(package_dirs: Sequence[Path], out: TextIO | None = None, relative_to: Path | None = None) -> int:
    """Print every circle and layering breach; 1 if there is any, else 0."""
    stream = out if out is not None else sys.stdout
    edges = build_graph(package_dirs, relative_to)
    modules = {e.source for e in edges} | {m for d in package_dirs for m in modules_of(d)}
    found = cycles(edges, modules)
    breaches = layering_breaches(edges)
    for n, component in enumerate(found, 1):
        members = set(component)
        print(f"import circle {n} ({len(component)} modules): {', '.join(component)}", file=stream)
        for e in sorted({e for e in edges if e.source in members and e.target in members}):
            print(f"  {e}", file=stream)
    for e in breaches:
        print(f"layering: {e}  ({layering_rule(e)})", file=stream)
    if found or breaches:
        print(f"{len(found)} import circle(s), {len(breaches)} layering breach(es)", file=stream)
        return 1
    print(f"no import circles, layering kept ({len(modules)} modules)", file=stream)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a.startswith("-") for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    dirs = [Path(a) for a in args] or [REPO / p for p in DEFAULT_PACKAGES]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        print(f"import_cycles: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    return check(dirs, relative_to=Path.cwd().resolve())


if __name__ == "__main__":
    sys.exit(main())
