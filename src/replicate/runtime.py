"""Where things live, which device and dtype we compute on, and how runs are seeded.

This is the one place that chooses the device and dtype: every chapter asks here.
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

PACKAGE_DIR = Path(__file__).resolve().parent


def _find_project_root() -> Path:
    # The package is installed editable from <root>/src/replicate; fall back to the cwd when it
    # was installed some other way (then paths are relative to where the user runs from).
    candidate = PACKAGE_DIR.parents[1]
    if (candidate / "pyproject.toml").exists() and (candidate / "notebooks").is_dir():
        return candidate
    return Path.cwd()


PROJECT_ROOT = _find_project_root()
NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
BOOK_DIR = PROJECT_ROOT / "book"
PRESETS_DIR = PACKAGE_DIR / "presets"


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write `data` to `path` through a temporary file beside it and a rename: a reader sees the
    old file or the new one, never half of one, whatever stops the writer."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def data_dir() -> Path:
    """The data directory: $REPLICATE_DATA_DIR, or `data/` in the project root."""
    return Path(os.environ.get("REPLICATE_DATA_DIR", PROJECT_ROOT / "data")).expanduser().resolve()


def display_path(path: str | Path) -> str:
    """A path as a reader should see it: relative to the project when it lies inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def runs_dir() -> Path:
    """Run folders outside the book (git-ignored): $REPLICATE_RUNS_DIR, or `runs/` in the project."""
    return Path(os.environ.get("REPLICATE_RUNS_DIR", PROJECT_ROOT / "runs")).expanduser().resolve()


def results_dir(chapter: str | None = None) -> Path:
    """Where verdicts are written: $REPLICATE_RESULTS_DIR, else a scratch run folder.

    Only `python -m replicate run` publishes into the book: it points $REPLICATE_RESULTS_DIR at
    a staging folder while a chapter executes and moves the verdict into place with the executed
    notebook. A notebook executed any other way (Jupyter, papermill, nbclient) writes its verdict
    to `runs/<chapter>/interactive/`, never into `book/`.
    """
    forced = os.environ.get("REPLICATE_RESULTS_DIR")
    if forced:
        return Path(forced).expanduser().resolve()
    return runs_dir() / (chapter or "unnamed") / "interactive"


def cache_dir() -> Path:
    """Finished training runs: $REPLICATE_CACHE_DIR, or `.cache/runs/` in the project root."""
    return Path(os.environ.get("REPLICATE_CACHE_DIR", PROJECT_ROOT / ".cache" / "runs")).expanduser().resolve()


def check_cache_dir(min_free_mb: int = 200) -> None:
    """Make sure finished training runs can be stored, before a chapter computes any of them.

    Creates the cache folder when it is missing; raises OSError with one line when it is not a
    folder, cannot be created, cannot be written (a file is written and removed to find out:
    permissions, read-only disks and mounts all show up that way) or its disk has less than
    `min_free_mb` MB free. Otherwise the run would train for minutes and fail on its first save.
    """
    folder = cache_dir()
    fix = "set REPLICATE_CACHE_DIR to a writable folder"
    try:
        mode = os.stat(folder).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # missing (or under a file, which mkdir reports below)
    except OSError as err:
        raise OSError(f"cache folder {folder} cannot be examined: {err.strerror}; {fix}") from None
    if mode is not None and not stat.S_ISDIR(mode):
        what = "a file, not a folder" if stat.S_ISREG(mode) else "not a folder"
        raise OSError(f"cache folder {folder} is {what}; remove it or {fix}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"cache folder {folder} cannot be created: {err.strerror}; {fix}") from None
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise OSError(f"cache folder {folder} is not writable: {err.strerror}; {fix}") from None
    free_mb = shutil.disk_usage(folder).free // 2**20
    if free_mb < min_free_mb:
        raise OSError(f"cache folder {folder} has {free_mb} MB free on its disk, less than the "
                      f"{min_free_mb} MB a run may need; free some space or {fix} on another disk")


def device():
    """CUDA when present, else CPU. $REPLICATE_DEVICE forces one (e.g. `cpu` on a GPU box)."""
    import torch  # imported here so that the CLI answers bad input without loading torch

    forced = os.environ.get("REPLICATE_DEVICE")
    if forced:
        return torch.device(forced)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(precise: bool = False):
    """float32 everywhere unless a chapter asks for `precise` float64 *and* runs on a GPU.

    float64 matrix products are about ten times slower than float32 on a laptop CPU, and the
    CPU presets were calibrated in float32; the paper presets (GPU) may ask for float64.
    """
    import torch

    return torch.float64 if precise and device().type == "cuda" else torch.float32


def seed_everything(seed: int):
    """Seed Python, NumPy and torch, and ask torch for deterministic kernels where it has them.

    Returns a CPU generator seeded the same way, for code that wants its own stream.
    """
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # warn_only: some CUDA kernels have no deterministic version; we want a run, not a crash.
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return torch.Generator().manual_seed(seed)


def comparable_code(source: str) -> str:
    """Python source as it computes: its syntax tree without docstrings (IPython's `%` and `!`
    lines dropped), so comments, docstrings and line breaks do not count. Text that is not
    Python comes back as it is. The one definition of "the same code" for the run cache
    (`training.source_hash`) and for the seeds' provenance (`harness.result_code`)."""
    import ast

    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


# What `run`, `sweep` and `build` write: outputs of the code, not part of it.
GENERATED_PATHS = ("book/claims", "book/results", "book/sweeps", "book/scoreboard.md",
                   "book/teaching.md", "book/_toc.yml", "book/benchmarks.md", "book/benchmarks.json")


def git_commit() -> str:
    """The commit the project is at, with `+dirty` when there are uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        # The book's outputs (executed chapters, verdicts, sweeps, generated pages) change while
        # a run publishes them; only changes to anything else make the code "dirty".
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in GENERATED_PATHS)],
                               cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if not sha:
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def describe_device() -> str:
    import torch

    dev = device()
    if dev.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(dev)})"
    threads = torch.get_num_threads()
    return f"cpu ({threads} thread{'s' if threads != 1 else ''})"


def provenance() -> dict:
    """What a result depends on besides its parameters: code commit, torch, and the hardware."""
    import torch

    commit = git_commit()
    record = {"git_commit": commit, "dirty": commit.endswith("+dirty"), "torch": torch.__version__}
    dev = device()
    if dev.type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(dev)
    else:
        try:
            record["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        except AttributeError:  # torch < 2.0
            record["cpu_capability"] = "unknown"
    return record


# --- where a chapter's time goes ---------------------------------------------------------------
# Seconds per phase in this process. Each second is charged once, to the innermost open phase:
# a measure called from inside the training loop's evaluation pauses the evaluation's clock.
COST: dict[str, float] = {}
_open_phases: list[list] = []  # [name, when its clock last (re)started], innermost last


@contextlib.contextmanager
def phase(name: str):
    """Charge the time spent inside to `name` in COST (see above: nested phases pause outer
    ones). About a microsecond per use, so it can wrap every training step."""
    now = time.perf_counter()
    if _open_phases:
        outer = _open_phases[-1]
        COST[outer[0]] = COST.get(outer[0], 0.0) + now - outer[1]
    _open_phases.append([name, now])
    try:
        yield
    finally:
        now = time.perf_counter()
        inner, since = _open_phases.pop()
        COST[inner] = COST.get(inner, 0.0) + now - since
        if _open_phases:
            _open_phases[-1][1] = now


def costed(name: str) -> Callable:
    """Decorator: every call of the function is a `phase(name)`."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with phase(name):
                return fn(*args, **kwargs)
        return timed
    return wrap


def cost_snapshot() -> dict[str, float]:
    """COST as it stands now, to pass to `cost_since` later."""
    return dict(COST)


def cost_since(start: dict[str, float], total: float) -> dict[str, float]:
    """The phases' seconds since the snapshot `start` of COST, largest first, with the rest of
    `total` (notebook code outside every phase: tables, drawing, small computations) as
    "other"; rounded to 0.1 s, phases under 0.05 s left out."""
    spent = {k: v - start.get(k, 0.0) for k, v in COST.items()}
    spent = {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
             if v >= 0.05}
    return {**spent, "other": round(max(total - sum(spent.values()), 0.0), 1)}
