"""The import graph of ``crate_nn``: its circles, the imports hidden inside functions, and the format decisions
written by hand.

    python -m benchmarks.imports [--out benchmarks/results/cpu/imports.json]

Read from the source with `ast` (nothing is imported): an edge A → B for every ``import``/``from … import`` in A
of a ``crate_nn`` module B, wherever it stands (a function-level import is an edge too: it runs as soon as the
function is called); ``from package import name`` is an edge to ``package.name`` when that is a module, and to the
package itself otherwise. What it counts:

* **circles** — the strongly connected components of more than one module (Tarjan): modules that import each
  other, directly or through others, so that none can be read, tested or imported first;
* **back-arrows** — the edges a depth-first walk (modules in sorted order) meets going back to a module still
  on its path: each closes a circle (one per circle at least; removing them all leaves no circle);
* **function-level imports** — ``import`` statements of ``crate_nn`` modules inside a function or method body,
  the usual way a circle is hidden from the interpreter;
* **format decisions** — lines that compare a file's ``"format"`` entry with ours by hand (``.get("format") ==``,
  ``== FORMAT``, ``!= FORMAT`` …) outside `crate_nn.weights`, the one package that should decide.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "crate_nn"
DECIDER = "crate_nn/weights/"
"""The package allowed to compare a file's format with ours."""
FORMAT_TEST = re.compile(r"""\.get\(\s*["']format["']\s*\)\s*[!=]=|[!=]=\s*(?:\w+\.)?FORMAT\b|\[["']format["']\]\s*[!=]=""")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _targets(node: ast.AST, package: str) -> set[str]:
    """The crate_nn modules one import statement names."""
    found = set()
    if isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
        module = ".".join([*base, *([node.module] if node.module else [])])
        submodules = {f"{module}.{alias.name}" for alias in node.names if is_module(f"{module}.{alias.name}")}
        found.update(submodules or {module})
        if len(submodules) < len(node.names):
            found.add(module)
    return {name for name in found if name.split(".")[0] == PACKAGE and is_module(name)}


def read_graph() -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(the import graph: module → the crate_nn modules it imports, the function-level imports: (file, line,
    imported module))."""
    graph, hidden = {}, []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            edges |= _targets(node, package)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    for target in sorted(_targets(inner, package)):
                        hidden.append((str(path.relative_to(ROOT)), inner.lineno, target))
        graph[name] = edges - {name}
    return graph, sorted(set(hidden))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

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
    return sorted(found)


def back_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges a depth-first walk in sorted order meets going back to a module on its path."""
    state, found = {}, []  # 1: on the path, 2: done

    def visit(v: str) -> None:
        state[v] = 1
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                found.append((v, w))
            elif w not in state:
                visit(w)
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)
    return found


def format_decisions() -> list[tuple[str, int, str]]:
    """Lines outside `DECIDER` that compare a ``format`` entry with ours by hand: (file, line, text)."""
    out = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative.startswith(DECIDER):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FORMAT_TEST.search(line) and "shards" not in relative:  # the shard manifests' own format tag
                out.append((relative, number, line.strip()))
    return out


def measure() -> dict:
    graph, hidden = read_graph()
    found = circles(graph)
    return {
        "modules": len(graph),
        "edges": sum(len(v) for v in graph.values()),
        "circles": found,
        "modules_in_circles": sum(len(c) for c in found),
        "back_arrows": back_arrows(graph),
        "function_level_imports": hidden,
        "files_with_function_level_imports": len({f for f, _, _ in hidden}),
        "format_decisions": format_decisions(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.imports", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the measures here as JSON")
    args = parser.parse_args(argv)
    result = measure()
    print(f"{result['modules']} modules, {result['edges']} import edges")
    print(f"circles: {len(result['circles'])} ({result['modules_in_circles']} modules)")
    for component in result["circles"]:
        print("  " + ", ".join(m.removeprefix(PACKAGE + ".") for m in component))
    print(f"back-arrows: {len(result['back_arrows'])}")
    for a, b in result["back_arrows"]:
        print(f"  {a} → {b}")
    print(f"function-level imports of crate_nn modules: {len(result['function_level_imports'])} in "
          f"{result['files_with_function_level_imports']} files")
    print(f"format decisions outside {DECIDER}: {len(result['format_decisions'])}")
    for file, line, text in result["format_decisions"]:
        print(f"  {file}:{line}: {text}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
