#!/usr/bin/env python3
"""tests/layers/check_clients.py SOURCE_DIR

The clients' module graphs have no cycle.  For each client, the modules
are its source files and an edge is an import of one by another:

  node    clients/node/src/*.js      import/export ... from './NAME.js'
  python  clients/python/src/skiplock/*.py
                                     from .NAME import ..., from . import NAME,
                                     import skiplock.NAME (also inside functions)
  rust    clients/rust/src/*.rs      crate::NAME (use or path); lib.rs, the
                                     crate root that declares the modules, is
                                     left out

Prints each client's module and edge count, then one line per cycle (its
modules), and exits 1 when there is any.
"""
import os
import re
import sys

NODE = re.compile(r"""^\s*(?:import|export)\b[^'"]*?from\s+['"]\./([\w.-]+)\.js['"]""", re.M)
PY_FROM = re.compile(r"^\s*from\s+\.(\w*)\s+import\s+([\w\s,()]+)", re.M)
PY_ABS = re.compile(r"^\s*(?:from|import)\s+skiplock\.(\w+)", re.M)
RUST = re.compile(r"\bcrate::(\w+)")


def node_edges(text, mods):
    return set(NODE.findall(text)) & mods


def python_edges(text, mods):
    out = set(PY_ABS.findall(text))
    for mod, names in PY_FROM.findall(text):
        if mod:
            out.add(mod)
        else:  # from . import a, b
            out.update(n.strip() for n in names.replace("(", "").replace(")", "").split(","))
    return out & mods


def rust_edges(text, mods):
    return set(RUST.findall(text)) & mods


CLIENTS = [
    ("node", "clients/node/src", ".js", node_edges, ()),
    ("python", "clients/python/src/skiplock", ".py", python_edges, ()),
    ("rust", "clients/rust/src", ".rs", rust_edges, ("lib",)),
]


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        print("usage: check_clients.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = sys.argv[1]
    problems = 0
    for name, folder, ext, edges_of, skip in CLIENTS:
        path = os.path.join(root, folder)
        files = sorted(f for f in os.listdir(path) if f.endswith(ext))
        mods = {f[: -len(ext)] for f in files} - set(skip)
        if not mods:
            print(f"violation: {name}: no modules in {folder}")
            problems += 1
            continue
        graph = {}
        for m in mods:
            with open(os.path.join(path, m + ext), encoding="utf-8") as fh:
                graph[m] = edges_of(fh.read(), mods) - {m}
        nedges = sum(len(v) for v in graph.values())
        print(f"{name:7} {len(mods):3} modules {nedges:3} imports")
        for comp in cycles(graph):
            print(f"violation: {name}: the modules {', '.join(comp)} import each other in a cycle")
            problems += 1
    if problems:
        print(f"{problems} cycle(s) among the clients' modules")
        return 1
    print("clients ok: no cycle among the modules of node, python, rust")
    return 0


if __name__ == "__main__":
    sys.exit(main())
