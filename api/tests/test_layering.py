"""The API's imports flow one way: no cycle among the modules of mallard_api (an import
inside a function counts as much as one at the top), and the analysis wing in layers,
each importing only the layers below it (grimp reads the import graph from the source).

The analysis wing, top to bottom:

- the analysis worker takes the queue's items; what people decide (triage);
- a comparison's settle, which tells the listeners once; change detection (alerts); a
  stored profile's `why:` told to the alerts and pull requests told before (why);
- the listeners of a comparison: commit verdicts, pull requests, calibrations;
- bisections (a listener, and started by a regressed verdict);
- the comparison lifecycle: open, compute the cells, settle the state, the report;
- what the lifecycle reads and builds: job specs, culprit lines, noise bands, follow-up
  plans, the ingest hooks that queue the worker's items;
- pure functions: no database, no settings, no web framework.

The module index of analysis/__init__.py lists every module, each above what it imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import grimp
import mallard_api.analysis
import pytest
from grimp import Layer

ANALYSIS = "mallard_api.analysis"
PURE = ("modes", "cells", "report", "moved", "joint", "curves", "explain", "extras", "canaries",
        "bisect_search", "differential")
LAYERS = (
    ("worker", "triage"),
    ("settle", "alerts", "why"),
    ("verdicts", "pull_requests", "calibrations", "profiles"),
    ("bisections",),
    ("comparisons",),
    ("specs", "culprits", "noise", "followups", "ingest", "policy"),
    ("pairs",),
)
# what pure modules may import of mallard_api besides each other, and what never
PURE_MAY_IMPORT = {"mallard_api.params"}
IO_PACKAGES = {"sqlalchemy", "psycopg", "fastapi", "starlette", "pydantic_settings", "httpx"}
# what no module of the analysis wing imports: the web side sits above it
ABOVE_ANALYSIS = ("mallard_api.main", "mallard_api.cli", "mallard_api.deps",
                  "mallard_api.routes", "mallard_api.pushes")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("mallard_api", cache_dir=None)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def described(graph: grimp.ImportGraph, component: list[str]) -> Iterator[str]:
    """Each import inside a cycle, with its line."""
    for a in component:
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            if b in component:
                lines = [d["line_number"] for d in graph.get_import_details(importer=a,
                                                                            imported=b)]
                yield f"{a} -> {b} (line {', '.join(map(str, lines))})"


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(
        line for component in found for line in described(graph, component))


def test_every_analysis_module_has_a_layer(graph: grimp.ImportGraph) -> None:
    placed = {m for layer in LAYERS for m in layer} | set(PURE)
    modules = {m.removeprefix(ANALYSIS + ".") for m in graph.find_children(ANALYSIS)}
    assert modules - placed == set(), "give each new module of analysis/ its layer here"


def test_analysis_layers(graph: grimp.ImportGraph) -> None:
    layers = [Layer(*layer) for layer in LAYERS] + [Layer(*PURE, independent=False)]
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers, containers={ANALYSIS})
    assert not illegal, "imports against the layers:\n" + "\n".join(
        f"{d.importer} -> {d.imported}" for d in sorted(
            illegal, key=lambda d: (d.importer, d.imported)))


def test_pure_modules_stay_pure() -> None:
    """Pure modules import each other, `params`, the wire types and numerical packages;
    never the database, the settings (but for type checking) or the web framework."""
    graph = grimp.build_graph("mallard_api", include_external_packages=True,
                              exclude_type_checking_imports=True, cache_dir=None)
    pure = {f"{ANALYSIS}.{m}" for m in PURE} & graph.modules
    wrong = sorted((m, d) for m in pure for d in graph.find_modules_directly_imported_by(m)
                   if d in IO_PACKAGES or (d.startswith("mallard_api.") and d not in pure
                                           and d not in PURE_MAY_IMPORT))
    assert wrong == []


def test_the_analysis_wing_never_imports_the_web_side(graph: grimp.ImportGraph) -> None:
    wing = graph.find_descendants(ANALYSIS)
    wrong = sorted((m, d) for m in wing for d in graph.find_modules_directly_imported_by(m)
                   if d.startswith(ABOVE_ANALYSIS))
    assert wrong == []


def test_the_module_index_lists_every_module_above_what_it_imports(
        graph: grimp.ImportGraph) -> None:
    """analysis/__init__.py lists each module once, each above every module it imports."""
    index = re.findall(r"^- `(\w+)`", mallard_api.analysis.__doc__ or "", re.MULTILINE)
    modules = {m.removeprefix(ANALYSIS + ".") for m in graph.find_children(ANALYSIS)}
    assert sorted(index) == sorted(modules)
    at = {m: i for i, m in enumerate(index)}
    upward = sorted((m, d) for m in index
                    for d in graph.find_modules_directly_imported_by(f"{ANALYSIS}.{m}")
                    if d.startswith(ANALYSIS + ".")
                    and at[d.removeprefix(ANALYSIS + ".")] <= at[m])
    assert upward == []
