"""One training loop for every chapter, and a cache of finished runs.

The loop knows nothing about models or measures: it calls `step(t)` (one optimisation step,
returning the loss) and, at log-spaced steps, `evaluate(t)` (returning a dict of metrics).
Chapters pass measures in through `evaluate`, so measures never import the loop.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from . import __version__
from .runtime import cache_dir, display_path


class DivergenceError(RuntimeError):
    """The loss became NaN or infinite."""


def log_spaced_steps(total: int, count: int, include_zero: bool = True) -> list[int]:
    """About `count` distinct integer steps from 1 to `total`, evenly spaced in log scale."""
    if total < 1 or count < 1:
        raise ValueError(f"need total >= 1 and count >= 1, got total={total}, count={count}")
    steps = np.unique(np.round(np.logspace(0, math.log10(total), count)).astype(int))
    steps = [int(s) for s in steps if 1 <= s <= total]
    if steps[-1] != total:
        steps.append(total)
    return ([0] if include_zero else []) + steps


def train_loop(step: Callable[[int], float], steps: int, eval_steps: list[int],
               evaluate: Callable[[int], dict[str, Any]], desc: str = "training") -> list[dict[str, Any]]:
    """Run `step(t)` for t = 1..steps; call `evaluate(t)` at each of `eval_steps` (0 = before training).

    Returns the evaluation history, one dict per evaluation with the key `step` and, from step 1
    on, `loss` (the training loss of that step). Stops with DivergenceError on a NaN/inf loss.
    An evaluation that returns `stop=True` (e.g. a threshold reached) ends training there; the
    `stop` key itself is not recorded.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    wanted = sorted(set(int(s) for s in eval_steps if 0 <= s <= steps))
    history = []
    if wanted and wanted[0] == 0:
        history.append({"step": 0, **evaluate(0)})
        if history[-1].pop("stop", False):
            return history
    wanted = set(wanted)
    # mininterval keeps the bar from costing time on fast steps; TQDM_DISABLE=1 silences it.
    bar = tqdm(range(1, steps + 1), desc=desc, mininterval=1.0, leave=False)
    for t in bar:
        loss = float(step(t))
        if not math.isfinite(loss):
            bar.close()
            raise DivergenceError(
                f"{desc}: the training loss became {loss} at step {t}. Lower the learning rate, "
                f"or check the initialisation scale and the data range.")
        if t in wanted:
            history.append({"step": t, "loss": loss, **evaluate(t)})
            bar.set_postfix(loss=f"{loss:.3g}", refresh=False)
            if history[-1].pop("stop", False):
                break
    bar.close()
    return history


PACKAGE_DIR = Path(__file__).resolve().parent
# Code that cannot change a result: the harness only chooses parameters, executes notebooks and
# writes verdicts and pages, so editing it must not throw away finished runs.
NOT_RESULT_CODE = ("harness",)
CACHE_FORMAT = 2
_source_memo: dict[tuple, str] = {}


def source_files(root: Path = PACKAGE_DIR) -> list[Path]:
    """The package's .py files whose code can change a cached result (all but the harness)."""
    return sorted(f for f in root.rglob("*.py")
                  if f.relative_to(root).parts[0] not in NOT_RESULT_CODE)


def source_hash(root: Path = PACKAGE_DIR) -> str:
    """A hash of the source of every module in `source_files`: any edit gives a new hash.

    All of them, not only the modules a run happened to import: which modules are loaded when a
    run starts depends on what ran before it in the same process, and a key must not.
    Memoised on the files' names, sizes and modification times.
    """
    files = source_files(root)
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if stamp not in _source_memo:
        digest = hashlib.sha256()
        for f in files:
            digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _source_memo.clear()
        _source_memo[stamp] = digest.hexdigest()[:16]
    return _source_memo[stamp]


def code_versions() -> dict[str, str]:
    """What besides the configuration decides a run's numbers: our code and the libraries'."""
    import torch

    return {"package": __version__, "source": source_hash(), "torch": torch.__version__,
            "numpy": np.__version__}


def config_key(config: dict[str, Any], versions: dict[str, str] | None = None) -> str:
    """A short, stable hash of a run's full configuration and of the code that computes it
    (`code_versions()`: the package's source, torch and numpy)."""
    code = versions if versions is not None else code_versions()
    blob = json.dumps({"config": config, "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# How many runs this process took from the cache and how many it computed: a chapter's recorded
# duration means little without it (a re-execution from the cache takes seconds).
CACHE_STATS = {"reused": 0, "computed": 0}


def _config_text(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _load_entry(path: Path, name: str, config: dict[str, Any], key: str) -> tuple[bool, Any]:
    """(True, result) for an entry that is what its name says, else (False, why it is not)."""
    try:
        with open(path, "rb") as fh:
            entry = pickle.load(fh)
    except Exception as err:  # noqa: BLE001 - truncated, garbage, or written by other code
        return False, f"it cannot be read ({type(err).__name__}: {err})"
    if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT:
        return False, "it is not a run-cache entry of this format"
    if entry.get("key") != key:
        return False, (f"it holds the run of {entry.get('name')!r} with key {entry.get('key')}, "
                       f"not {key} (moved or copied by hand?)")
    if entry.get("name") != name or entry.get("config") != _config_text(config):
        return False, "its recorded name or configuration differs from this run's"
    return True, entry["result"]


def cached_run(name: str, config: dict[str, Any], run: Callable[[], Any], verbose: bool = True) -> Any:
    """Return `run()`'s result, reusing a finished run of the same `config` and code if there is one.

    Results are pickled to `<cache dir>/<name>/<key>.pkl`, where the key hashes `config` and
    `code_versions()` (the package's source outside the harness, torch and numpy), so that
    editing an objective or a model never reuses a run of the old code. Each entry records its
    own key, name and configuration, checked on load: an entry that cannot be read or is not
    the run asked for (a file renamed or copied by hand) is recomputed, with one printed line
    naming the file and the reason. Entries are written to a temporary file and renamed into
    place, so an interrupted run never leaves a half-written entry. Put everything that changes
    the result into `config` (seed, steps, learning rate, ...). Set REPLICATE_NO_CACHE=1 to
    always recompute.
    """
    key = config_key(config)
    path = cache_dir() / name / f"{key}.pkl"
    if path.exists() and not os.environ.get("REPLICATE_NO_CACHE"):
        ok, result = _load_entry(path, name, config, key)
        if ok:
            if verbose:
                print(f"{name}: reusing the finished run {path.name} from the run cache")
            CACHE_STATS["reused"] += 1
            return result
        print(f"{name}: recomputing the run cache entry {display_path(path)}: {result}")
    result = run()
    CACHE_STATS["computed"] += 1
    entry = {"format": CACHE_FORMAT, "key": key, "name": name, "config": _config_text(config),
             "result": result}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(entry, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result
