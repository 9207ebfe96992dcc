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
from .runtime import cache_dir


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


def config_key(config: dict[str, Any]) -> str:
    """A short, stable hash of a run's full configuration (and the package version)."""
    blob = json.dumps({"config": config, "version": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# How many runs this process took from the cache and how many it computed: a chapter's recorded
# duration means little without it (a re-execution from the cache takes seconds).
CACHE_STATS = {"reused": 0, "computed": 0}


def cached_run(name: str, config: dict[str, Any], run: Callable[[], Any], verbose: bool = True) -> Any:
    """Return `run()`'s result, reusing a finished run with the same `config` if there is one.

    Results are pickled to `<cache dir>/<name>/<hash>.pkl`, written to a temporary file and
    renamed into place, so an interrupted run never leaves a half-written entry. Put everything
    that changes the result into `config` (seed, steps, learning rate, ...). Set
    REPLICATE_NO_CACHE=1 to always recompute.
    """
    path = cache_dir() / name / f"{config_key(config)}.pkl"
    if path.exists() and not os.environ.get("REPLICATE_NO_CACHE"):
        if verbose:
            print(f"{name}: reusing the finished run {path.name} from the run cache")
        with open(path, "rb") as fh:
            result = pickle.load(fh)
        CACHE_STATS["reused"] += 1
        return result
    result = run()
    CACHE_STATS["computed"] += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result
