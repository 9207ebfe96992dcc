"""What a chapter's numbers are computed by, and whether two commits agree on it.

A chapter's seeds may run at other commits than its published run, when only prose, pages or the
harness changed in between. They belong together only if the code that computes the numbers is
the same. That code is the chapter's *result code*:

- the code cells of `notebooks/<chapter>.ipynb`;
- every module of the package those cells import, directly or through other modules (imports
  inside functions included), with each package's `__init__.py` on the way, less the top-level
  functions and classes that nothing in the result code names (`_named_definitions`): a
  function added to a shared module for another chapter leaves this chapter's result code as it
  was, while a change to one it calls, however indirectly, does not;
- the chapter's `cpu` preset, `presets/<chapter>/cpu.yaml`.

Python is compared as it computes (`runtime.comparable_code`, the run cache's definition too:
its syntax tree without docstrings), so comments, docstrings and line breaks do not count; the preset as its parsed values, so its comments do not either. Not in it:
the chapter's `chapter.yaml` (title, claim, input checks, validate's tolerance), the notebook's
Markdown cells, and the harness, which runs the notebook and writes pages but computes nothing a
verdict reports unless the notebook imports it (then it is in).
"""
from __future__ import annotations

import ast
import json
import subprocess
from functools import lru_cache
from pathlib import Path

import yaml

from ..runtime import PROJECT_ROOT, comparable_code

PACKAGE, SOURCE = "replicate", "src"
RESULT_CODE = ("the notebook's code cells, the package modules they import directly or through "
               "other modules, and the chapter's cpu preset, docstrings and comments aside")


@lru_cache(maxsize=None)
def _show(repo: Path, commit: str, path: str) -> str | None:
    """A file's text at a commit, or None where it is not there (or git cannot say)."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True,
                           text=True, timeout=60)
    return None if shown.returncode else shown.stdout


def _module_path(repo: Path, commit: str, module: str) -> str | None:
    """The file of a package module at a commit: `a/b.py`, else `a/b/__init__.py`, else None."""
    base = f"{SOURCE}/{module.replace('.', '/')}"
    for path in (f"{base}.py", f"{base}/__init__.py"):
        if _show(repo, commit, path) is not None:
            return path
    return None


def _parse(source: str) -> ast.AST | None:
    """Python source (IPython's `%` and `!` lines dropped) as a tree, or None if it is not Python."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _imported(tree: ast.AST, module: str | None, is_package: bool) -> set[str]:
    """The package modules a tree imports: `module` is where the tree lives (None for a notebook
    cell), so that relative imports can be resolved."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative to the package the module is in
                parts = (module or "").split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] == PACKAGE:
                found |= {base} | {f"{base}.{a.name}" for a in node.names}  # a name or a module
    return found


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _names(node: ast.AST) -> set[str]:
    """Every name a tree uses: variables, attributes (`module.function`), imported names."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.alias):
            found.add(sub.name.split(".")[-1])
    return found


def _named_definitions(cells: list[ast.AST], modules: dict[str, ast.Module]) -> set[str]:
    """The names of the modules' top-level functions and classes that the result code reaches:
    those named in the notebook's cells or in the modules' other top-level statements (constants,
    registries such as a dict of functions, imports), then those named inside the definitions
    kept, until nothing new is named. By name only, so a name used anywhere keeps every
    definition of that name (never fewer than are reached). Not followed: a definition reached
    only through a name built at run time (getattr with a computed string); the package has none
    in the code its chapters run."""
    definitions = [stmt for tree in modules.values() for stmt in tree.body
                   if isinstance(stmt, DEFINITIONS)]
    frontier = list(cells) + [stmt for tree in modules.values() for stmt in tree.body
                              if not isinstance(stmt, DEFINITIONS)]
    named: set[str] = set()
    while frontier:
        new = set().union(*(_names(node) for node in frontier)) - named
        named |= new
        frontier = [d for d in definitions if d.name in new]
    return named


# Code that says where a run came from, not what it computed: the commit, and which of the pages
# `build` writes do not make it dirty. A verdict records the commit, but no number depends on
# how it is found, so editing these leaves every chapter's result code as it was.
PROVENANCE = {f"{SOURCE}/{PACKAGE}/runtime.py": {"GENERATED_PATHS", "git_commit"}}


def _defines(stmt: ast.stmt, names: set[str]) -> bool:
    """Whether `stmt` is a definition or a plain assignment of one of `names`."""
    if isinstance(stmt, DEFINITIONS):
        return stmt.name in names
    targets = (stmt.targets if isinstance(stmt, ast.Assign)
               else [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
    return bool(targets) and all(isinstance(t, ast.Name) and t.id in names for t in targets)


def _pruned(tree: ast.Module, named: set[str], provenance: set[str] = frozenset()) -> str:
    """The module as it computes for the chapter: without the definitions nothing names, nor the
    provenance code named in `provenance`."""
    kept = [stmt for stmt in tree.body
            if (not isinstance(stmt, DEFINITIONS) or stmt.name in named)
            and not _defines(stmt, provenance)]
    return comparable_code(ast.unparse(ast.Module(body=kept, type_ignores=[])))


def result_code(repo: Path, commit: str, chapter: str) -> dict[str, str] | None:
    """The chapter's result code at a commit, as {part: comparable text}, or None when the commit
    lacks the notebook (or git cannot show it)."""
    notebook = _show(repo, commit, f"notebooks/{chapter}.ipynb")
    if notebook is None:
        return None
    cells = ["".join(c["source"]) for c in json.loads(notebook)["cells"]
             if c["cell_type"] == "code"]
    parts, pending, cell_trees, modules = {}, set(), [], {}
    for i, cell in enumerate(cells):
        tree = _parse(cell)
        parts[f"notebook code cell {i + 1}"] = comparable_code(cell)
        if tree is not None:
            cell_trees.append(tree)
            pending |= _imported(tree, None, False)
    seen = set()
    while pending:
        module = pending.pop()
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        chain = [".".join(module.split(".")[:i + 1]) for i in range(module.count(".") + 1)]
        for name in chain:
            if name in seen:
                continue
            seen.add(name)
            path = _module_path(repo, commit, name)
            if path is None:  # a name imported from a module, not a module itself
                continue
            text = _show(repo, commit, path)
            tree = _parse(text)
            if tree is None:  # not Python: compared as its text
                parts[path] = comparable_code(text)
                continue
            modules[path] = tree
            pending |= _imported(tree, name, path.endswith("__init__.py")) - seen
    named = _named_definitions(cell_trees, modules)
    parts |= {path: _pruned(tree, named, PROVENANCE.get(path, set()))
              for path, tree in modules.items()}
    preset = _show(repo, commit, f"{SOURCE}/{PACKAGE}/presets/{chapter}/cpu.yaml")
    parts["cpu preset"] = json.dumps(None if preset is None else yaml.safe_load(preset),
                                     sort_keys=True)
    return parts


def result_code_differences(chapter: str, first: str, second: str, repo: Path = PROJECT_ROOT
                            ) -> list[str] | None:
    """The parts of the chapter's result code that differ between two commits ([] when none),
    or None when git cannot tell: a dirty or unknown commit, or one this clone lacks."""
    if any(c.endswith("+dirty") or c == "unknown" for c in (first, second)):
        return None
    if first == second:
        return []
    codes = [result_code(Path(repo), commit, chapter) for commit in (first, second)]
    if None in codes:
        return None
    return sorted(p for p in codes[0].keys() | codes[1].keys() if codes[0].get(p) != codes[1].get(p))


def difference_text(entry: dict) -> str:
    """What differs at one commit of `code_provenance`, in words."""
    return "git cannot compare them" if entry["differs"] is None else ", ".join(entry["differs"])


def code_provenance(chapter: str, runs: dict[int, dict], published: str | None,
                    repo: Path = PROJECT_ROOT) -> dict:
    """The commits the seeds ran at, each with what of the chapter's result code differs from the
    published run's commit; `all_same` when nothing does for any of them."""
    by_commit: dict[str, list[int]] = {}
    for seed, run in runs.items():
        by_commit.setdefault(run["record"].get("git_commit", "unknown"), []).append(seed)
    differs = {c: None if published is None else result_code_differences(chapter, c, published, repo)
               for c in by_commit}
    return {"published_commit": published, "result_code": RESULT_CODE,
            "commits": [{"commit": c, "seeds": seeds, "differs": differs[c]}
                        for c, seeds in by_commit.items()],
            "all_same": bool(differs) and all(d == [] for d in differs.values())}
