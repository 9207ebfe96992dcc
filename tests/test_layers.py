"""The package's folders are its layers, and imports point one way:
harness -> experiments -> measures -> core (the top-level modules)."""
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
