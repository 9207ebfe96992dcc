"""The package's folders are its layers, and imports point one way:
harness -> experiments -> measures -> core (the top-level modules), with no circle anywhere:
not between layers, not between two modules of one layer, lazy (function-local) imports included."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__import__("replicate").__file__).resolve().parent
RANK = {"core": 0, "measures": 1, "experiments": 2, "harness": 3}


def layer_of(module: str) -> str:
    """`replicate.measures.jacobian` -> "measures"; `replicate.training` -> "core"."""
    if module == "replicate.__main__":
        return "harness"  # `python -m replicate` is the command line's entry point
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in RANK else "core"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module) for every import of this package in the file, lazy ones included."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("replicate")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("replicate"):
                continue
            if node.module is None or target in ("replicate", "replicate.measures",
                                                 "replicate.experiments", "replicate.harness"):
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return found


def violations(root: Path = PACKAGE) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        source = module_name(path, root)
        for line, target in imported_modules(path, root):
            if RANK[layer_of(target)] > RANK[layer_of(source)]:
                bad.append(f"{source}:{line} imports {target} "
                           f"({layer_of(source)} must not import {layer_of(target)})")
    return bad


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a name imported from a package counts as its
    submodule when there is one)."""
    modules = {module_name(p, root) for p in root.rglob("*.py")}
    graph = {}
    for path in root.rglob("*.py"):
        source = module_name(path, root)
        targets = set()
        for _, target in imported_modules(path, root):
            while target and target not in modules:  # `replicate.x.name` where name is a function
                target = target.rpartition(".")[0]
            if target and target != source:
                targets.add(target)
        graph[source] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm), each a
    set of modules that import one another round a loop. A package's __init__ importing its own
    submodules is no circle unless a submodule imports the package back."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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


def test_no_module_imports_round_a_circle():
    assert circles(import_graph()) == []


def test_the_circle_check_finds_a_lazy_circle_inside_a_layer(tmp_path):
    fake = tmp_path / "replicate"
    (fake / "harness").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "harness" / "__init__.py").write_text("")
    (fake / "harness" / "a.py").write_text("from . import b\n")
    (fake / "harness" / "b.py").write_text("def f():\n    from .c import g\n")
    (fake / "harness" / "c.py").write_text("def g():\n    from replicate.harness.a import x\n")
    (fake / "harness" / "d.py").write_text("from . import a\n")
    assert circles(import_graph(fake)) == [["replicate.harness.a", "replicate.harness.b",
                                            "replicate.harness.c"]]


def test_every_layer_has_its_folder():
    for layer in ("measures", "experiments", "harness"):
        assert (PACKAGE / layer / "__init__.py").exists()
    assert not (PACKAGE / "test_functions.py").exists()  # the objectives are not a test file


def test_imports_point_one_way():
    assert violations() == []


def test_the_check_catches_an_upward_import(tmp_path):
    fake = tmp_path / "replicate"
    (fake / "measures").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "measures" / "__init__.py").write_text("")
    (fake / "measures" / "bad.py").write_text("from ..experiments import grokalign\n"
                                              "from ..harness.verdict import claim\n")
    (fake / "runtime.py").write_text("def f():\n    from .measures import bad\n")
    found = violations(fake)
    assert len(found) == 3, found
    assert "replicate.measures.bad:1 imports replicate.experiments.grokalign" in found[0]


@pytest.mark.parametrize("layer,expected", [("replicate.training", "core"),
                                            ("replicate.measures.ntk", "measures"),
                                            ("replicate.harness.cli", "harness")])
def test_layer_of(layer, expected):
    assert layer_of(layer) == expected
