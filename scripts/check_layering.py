#!/usr/bin/env python3
"""Lists the include edges between Tessera's packages and fails on one the layering forbids.

The allowed edges come from src/CMakeLists.txt: each `tessera_package(NAME DEPENDS a b ...)` may
include its own headers and those of every package it reaches through DEPENDS (kernels/ may
include core only; apps and tests may include anything). Exit status 1, with each offending
file:line, when a package includes a package it does not reach, or when the DEPENDS graph has a
cycle. Usage: check_layering.py [SOURCE_DIR] [--edges]  (--edges prints every package edge and its
include count)."""
import pathlib
import re
import sys


def declared_graph(cmake_text):
    graph = {}
    for match in re.finditer(r"tessera_package\((\w+)([^)]*)\)", cmake_text):
        name, rest = match.group(1), match.group(2)
        deps = []
        depends = re.search(r"DEPENDS((?:\s+\w+)+?)(?:\s+LIBRARIES|\s*$)", rest)
        if depends:
            deps = depends.group(1).split()
        graph[name] = deps
    graph["kernels"] = ["core"]  # built by nvcc with the core include root only
    if "ops" in graph:
        graph["ops"] = graph["ops"] + ["kernels"]
    return graph


def find_cycle(graph):
    state = {}
    def visit(node, path):
        state[node] = "open"
        for dep in graph.get(node, []):
            if state.get(dep) == "open":
                return path + [node, dep]
            if dep not in state:
                cycle = visit(dep, path + [node])
                if cycle:
                    return cycle
        state[node] = "done"
        return None
    for node in graph:
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for dep in graph.get(node, []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    graph = declared_graph((root / "src" / "CMakeLists.txt").read_text())
    errors = []
    cycle = find_cycle(graph)
    if cycle:
        errors.append("package cycle in src/CMakeLists.txt: " + " -> ".join(cycle))
    include = re.compile(r'^\s*#\s*include\s+"(?:tessera/(\w+)|(kernels))/')
    edges = {}
    sources = [(p, p.relative_to(root / "src" / "tessera").parts[0]) for p in (root / "src" / "tessera").rglob("*")
               if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    sources += [(p, "kernels") for p in (root / "kernels").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    for path, package in sorted(sources):
        if package not in graph:
            errors.append(f"{path.relative_to(root)}: package '{package}' has no tessera_package() in src/CMakeLists.txt")
            continue
        allowed = reachable(graph, package) | {package}
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = include.match(line)
            if not match:
                continue
            target = match.group(1) or match.group(2)
            if target != package:
                edges[(package, target)] = edges.get((package, target), 0) + 1
            if target not in allowed:
                errors.append(f"{path.relative_to(root)}:{number}: {package} includes {target} "
                              f"(not below it: {package} may include {', '.join(sorted(allowed))})")
    # Every edge must also agree with the declared graph having no cycle among the edges themselves.
    edge_graph = {}
    for (a, b) in edges:
        edge_graph.setdefault(a, []).append(b)
    cycle = find_cycle(edge_graph)
    if cycle:
        errors.append("include cycle between packages: " + " -> ".join(cycle))
    if "--edges" in sys.argv or errors:
        for (a, b), count in sorted(edges.items()):
            print(f"{a} -> {b} ({count})")
    for error in errors:
        print("LAYERING ERROR:", error)
    if errors:
        return 1
    print(f"layering OK: {len(edges)} package edges, all downward, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
