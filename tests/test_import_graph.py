"""The product's import graph: no module imports itself back through others, and the layers point down.

A circle means a newcomer cannot read one module without the others; an arrow running back up (a lower
package importing a higher one) means the layering in docs/ARCHITECTURE.md no longer holds. Imports made
only for type checking count too: they say who knows whom.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coordinator", "translate", "gateway", "rehearsal", "groupgate")

# The product's layers, highest first: a module may import its own layer and the ones below it. groupgate/
# (the public testing package) drives the gateway from outside, so it sits on top.
LAYERS = ("groupgate", "rehearsal", "gateway", "translate", "coordinator")
# gateway/'s packages, highest first (docs/ARCHITECTURE.md). Packages on one line share a level and do not
# import each other; the modules at gateway/'s top (logging, metrics) sit below them all.
GATEWAY_LEVELS: tuple[tuple[str, ...], ...] = (
    ("ops",),
    ("fleet",),
    ("groups",),
    ("authz",),
    ("net", "state"),
    ("security",),
    ("config",),
    ("metrics",),
    ("wire", "logging", "loop_thread"),
)


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for package in PACKAGES:
        for f in (ROOT / package).rglob("*.py"):
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = f
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the product modules it imports (``from pkg import submodule`` counts as the submodule)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = subs if all(s in mods for s in subs) else [base, *subs]
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
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
    return found


def _gateway_level(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "gateway" or len(parts) < 2:
        return None
    for level, names in enumerate(GATEWAY_LEVELS):
        if parts[1] in names:
            return level
    return None


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower layer or gateway package into a higher one, or between two packages of a level."""
    bad = []
    for m, deps in graph.items():
        for d in deps:
            top_m, top_d = m.split(".")[0], d.split(".")[0]
            if LAYERS.index(top_d) < LAYERS.index(top_m):
                bad.append(f"{m} -> {d}: {top_m}/ sits below {top_d}/")
                continue
            lm, ld = _gateway_level(m), _gateway_level(d)
            if lm is None or ld is None or m.split(".")[1] == d.split(".")[1]:
                continue
            if ld < lm:
                bad.append(f"{m} -> {d}: gateway/{m.split('.')[1]} sits below gateway/{d.split('.')[1]}")
            elif ld == lm:
                bad.append(f"{m} -> {d}: gateway/{m.split('.')[1]} and gateway/{d.split('.')[1]} share a level")
    return sorted(bad)


def test_the_product_has_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_import_points_down_the_layers() -> None:
    bad = upward_arrows(import_graph())
    assert not bad, "imports that run back up:\n" + "\n".join(bad)


def test_every_gateway_package_has_a_level() -> None:
    packages = {p.name for p in (ROOT / "gateway").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in (ROOT / "gateway").glob("*.py") if p.stem != "__init__"}
    levelled = {name for names in GATEWAY_LEVELS for name in names}
    assert packages | modules <= levelled, f"not placed in GATEWAY_LEVELS: {sorted((packages | modules) - levelled)}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert sorted(circles(graph)) == expected


def test_an_arrow_back_up_is_reported() -> None:
    graph = {
        "gateway.net.server": {"gateway.groups.layer"},
        "gateway.groups.layer": {"gateway.net.server"},
        "coordinator.state": {"translate.group_service"},
        "translate.group_service": set(),
        "gateway.net.rewrite": {"gateway.state.store"},
        "gateway.state.store": set(),
    }
    bad = upward_arrows(graph)
    assert any(b.startswith("gateway.net.server -> gateway.groups.layer") for b in bad)
    assert any(b.startswith("coordinator.state -> translate.group_service") for b in bad)
    assert any("share a level" in b for b in bad)
    assert not any(b.startswith("gateway.groups.layer") for b in bad)
