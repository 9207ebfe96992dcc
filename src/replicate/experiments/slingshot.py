"""Chapter 05's run: a grokking run on modular arithmetic that keeps what the landscape
measures need, i.e. the cosine of consecutive weights at every step (float64), weight
snapshots on a regular grid for the trajectory PCA, and weight snapshots around each loss
spike, detected online so that the Hessian can be taken where the slingshots happen.

Step convention: "step k" is the k-th entry of the run's loss curve, i.e. the weights after
k − 1 updates. A snapshot stored under step k has loss `run.loss[k-1]`, gradient norm
`run.grad_norm[k-1]` and cosine `cos_prev[k-1]` with the weights of step k − 1.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .algorithmic import AlgorithmicData, ModularRun, train_modular
from ..measures.landscape import SpikeDetector, flat_params, hessian_extremes
from ..models import algorithmic_model


class TrajectoryRecorder:
    """The `measure(step, model)` callback of `train_modular`, called after every update."""

    def __init__(self, data: AlgorithmicData, snapshot_every: int, before: list[int], after: list[int],
                 detector: SpikeDetector):
        self.data, self.snapshot_every = data, snapshot_every
        self.before, self.after = sorted(before), sorted(after)   # offsets (steps) around a spike
        self.detector = detector
        self.recent: deque = deque(maxlen=max([-b for b in self.before] + [1]) + 1)
        self.pending: set[int] = set()
        self.snapshots: dict[int, torch.Tensor] = {}
        self.cos_prev: list[float] = []
        self.prev: torch.Tensor | None = None
        self.reached_train = False

    def __call__(self, updates: int, model: nn.Module) -> dict:
        k = updates + 1  # curve step of the weights after `updates` updates
        theta = flat_params(model)
        wide = theta.to(torch.float64)
        if self.prev is not None:
            self.cos_prev.append(float((wide @ self.prev) / (wide.norm() * self.prev.norm())))
        self.prev = wide
        self.recent.append((k, theta))
        if k == 1 or k % self.snapshot_every == 0 or k in self.pending:
            self.snapshots[k] = theta
            self.pending.discard(k)
        with torch.no_grad():
            logits = model(self.data.train_x)
            loss = float(nn.functional.cross_entropy(logits, self.data.train_y))
            acc = float((logits.argmax(1) == self.data.train_y).float().mean())
        if not self.reached_train and acc >= 0.99:
            self.reached_train = True
            self.detector.start = k  # spikes count only after memorisation (t > t2)
        if self.detector.update(k, loss):
            for step, vec in self.recent:
                if k - step in [-b for b in self.before]:
                    self.snapshots[step] = vec
            self.snapshots[k] = theta
            self.pending.update(k + a for a in self.after)
        return {}


@dataclass
class SlingshotRun:
    run: ModularRun
    cos_prev: np.ndarray                 # cos_prev[k-1] = cos(θ at step k, θ at step k-1); nan at k=1
    snapshots: dict[int, np.ndarray]     # curve step -> flat float32 weights
    online_spikes: list[int]
    grid_steps: list[int] = field(default_factory=list)


GROKKED = 0.99  # validation accuracy at which a run counts as generalised (t4)


def slingshot_run(data: AlgorithmicData, cap: int, seed: int, lr: float, weight_decay: float,
                  betas: tuple[float, float], embed_dim: int, hidden: int, snapshot_every: int,
                  spike_before: list[int], spike_after: list[int], detector: SpikeDetector,
                  model_kind: str = "mlp", patience: float | None = None) -> SlingshotRun:
    """The recorded run. With `patience`, it stops at step ceil((1 + patience) t4), t4 being the
    first step with validation accuracy >= GROKKED, or at `cap` if that comes first; without,
    it trains for `cap` steps."""
    recorder = TrajectoryRecorder(data, snapshot_every, spike_before, spike_after, detector)
    run = train_modular(data, cap, seed=seed, lr=lr, weight_decay=weight_decay, betas=betas,
                        embed_dim=embed_dim, hidden=hidden, model_kind=model_kind,
                        measure_steps=range(0, cap + 1), measure=recorder, desc="slingshot run",
                        stop_at_val_acc=None if patience is None else GROKKED,
                        patience=patience or 0.0)
    run.measures = []  # one empty dict per step: nothing to keep
    # The recorder sees steps 1..steps+1 (the last one being the final weights); the curves have
    # `steps` entries, so drop what lies past them.
    steps = len(run.loss)
    cos = np.array([np.nan] + recorder.cos_prev[:steps - 1])
    snaps = {k: v.numpy() for k, v in sorted(recorder.snapshots.items()) if k <= steps}
    return SlingshotRun(run, cos, snaps, [s for s in detector.spikes if s <= steps],
                        grid_steps=sorted(k for k in snaps if k == 1 or k % snapshot_every == 0))


def hessians_at(data: AlgorithmicData, embed_dim: int, hidden: int, snapshots: dict[int, np.ndarray],
                iterations: int, seed: int = 0, model_kind: str = "mlp") -> dict[int, dict]:
    """λ_max, λ_min (Lanczos), how well each converged and the wall-clock cost at each snapshot.

    `residual_max` / `residual_min` are ‖H y − θ y‖ of the extreme Ritz pairs (θ, y);
    `relative_residual` is the larger over the largest |Ritz value| (an estimate of ‖H‖)."""
    model = algorithmic_model(model_kind, data.p, embed_dim, hidden)
    out = {}
    for k, vec in snapshots.items():
        start = time.perf_counter()
        res = hessian_extremes(model, data.train_x, data.train_y, torch.from_numpy(vec), iterations, seed)
        out[k] = {"lambda_max": res.lambda_max, "lambda_min": res.lambda_min,
                  "residual_max": res.residual_max, "residual_min": res.residual_min,
                  "relative_residual": res.relative_residual,
                  "seconds": time.perf_counter() - start}
    return out


def residual_summary(hess: dict[int, dict]) -> dict[str, float]:
    """The worst convergence over Hessian checkpoints: the largest residual of the λ_max and of
    the λ_min Ritz pair, each relative to that checkpoint's ‖H‖ estimate (the largest |Ritz
    value|, λ_max here). A residual r means an eigenvalue lies within r of the reported value."""
    scale = {k: max(abs(h["lambda_max"]), abs(h["lambda_min"]), 1e-30) for k, h in hess.items()}
    return {"lambda_max": max(h["residual_max"] / scale[k] for k, h in hess.items()),
            "lambda_min": max(h["residual_min"] / scale[k] for k, h in hess.items())}


def order_of_magnitude(x: float) -> str:
    """`x` as the power of ten at or above it ("<= 1e-03"): a bound that stays put when x moves
    within rounding noise from machine to machine."""
    if not np.isfinite(x) or x <= 0:
        return str(x)
    return f"<= 1e{int(np.ceil(np.log10(x))):+03d}"


# --- cached runs of the chapter (the notebook and any pre-computation share these keys) --------

CHAPTER = "05_slingshot_hessian"
RUN_KEYS = ("seed", "model", "p", "operation", "train_fraction", "cap", "patience", "lr", "weight_decay",
            "betas", "embed_dim", "hidden")


def chapter_data(params: dict) -> AlgorithmicData:
    from .algorithmic import algorithmic_task
    return algorithmic_task(params["operation"], params["p"], params["train_fraction"], params["seed"])


def detector_from(params: dict) -> SpikeDetector:
    return SpikeDetector(factor=params["spike_factor"], window=params["spike_window"],
                         floor=params["spike_floor"], gap=params["spike_gap"])


def cached_slingshot_run(params: dict) -> SlingshotRun:
    from ..training import cached_run
    keys = RUN_KEYS + ("snapshot_every", "spike_before", "spike_after", "spike_factor", "spike_window",
                       "spike_floor", "spike_gap")
    config = {"run": "slingshot", **{k: params[k] for k in keys}}
    return cached_run(CHAPTER, config, lambda: slingshot_run(
        chapter_data(params), params["cap"], params["seed"], params["lr"], params["weight_decay"],
        tuple(params["betas"]), params["embed_dim"], params["hidden"], params["snapshot_every"],
        params["spike_before"], params["spike_after"], detector_from(params), params["model"],
        params["patience"]))


def cached_clipped_run(params: dict, clip_norm: float) -> ModularRun:
    from ..training import cached_run
    config = {"run": "clipped", "clip_norm": clip_norm, **{k: params[k] for k in RUN_KEYS}}

    def go() -> ModularRun:
        run = train_modular(chapter_data(params), params["cap"], seed=params["seed"], lr=params["lr"],
                            weight_decay=params["weight_decay"], betas=tuple(params["betas"]),
                            embed_dim=params["embed_dim"], hidden=params["hidden"],
                            model_kind=params["model"], clip_norm=clip_norm,
                            desc=f"clipped at {clip_norm:g}", stop_at_val_acc=GROKKED,
                            patience=params["patience"])
        run.state_dict = None  # only the curves are needed
        return run

    return cached_run(CHAPTER, config, go)


def hessian_checkpoints(params: dict, sling: SlingshotRun) -> tuple[list[int], set[int], set[int]]:
    """The steps where the Hessian is taken: a regular grid, and every snapshot kept around an
    online-detected spike. Returns (all, regular, around spikes)."""
    regular = {k for k in sling.snapshots if k == 1 or k % params["hessian_every"] == 0}
    offsets = set(params["spike_before"]) | {0} | set(params["spike_after"])
    windowed = {k for k in sling.snapshots for s in sling.online_spikes if k - s in offsets}
    return sorted(regular | windowed), regular, windowed


def _run_config(params: dict) -> dict:
    keys = RUN_KEYS + ("snapshot_every", "spike_before", "spike_after", "spike_factor", "spike_window",
                       "spike_floor", "spike_gap")
    return {k: params[k] for k in keys}


def cached_hessians(params: dict, sling: SlingshotRun, only: list[int] | None = None) -> dict[int, dict]:
    """Hessian extremes at every checkpoint, each cached on its own (so that several processes can
    fill the cache in parallel: pass `only` a subset of the checkpoints)."""
    from ..training import cached_run
    data = chapter_data(params)
    out = {}
    for k in (only if only is not None else hessian_checkpoints(params, sling)[0]):
        config = {"hessian_at": k, "iterations": params["lanczos_iterations"], **_run_config(params)}
        out[k] = cached_run(CHAPTER, config, lambda: hessians_at(
            data, params["embed_dim"], params["hidden"], {k: sling.snapshots[k]},
            params["lanczos_iterations"], params["seed"], params["model"])[k], verbose=False)
    return out


def cached_surface(params: dict, final: np.ndarray, directions: np.ndarray, a_grid: np.ndarray,
                   b_grid: np.ndarray) -> np.ndarray:
    """The training loss on the plane final + a d1 + b d2 (see landscape.loss_surface)."""
    from ..measures.landscape import loss_surface
    from ..training import cached_run
    config = {"surface": [float(a_grid[0]), float(a_grid[-1]), float(b_grid[0]), float(b_grid[-1]), len(a_grid),
                          len(b_grid)], **_run_config(params)}
    data = chapter_data(params)
    d1, d2 = (torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32)) for d in directions[:2])
    return cached_run(CHAPTER, config, lambda: loss_surface(
        algorithmic_model(params["model"], data.p, params["embed_dim"], params["hidden"]), data.train_x, data.train_y,
        torch.from_numpy(final), d1, d2, a_grid, b_grid))


def pca_rows(params: dict, sling: SlingshotRun) -> list[int]:
    """Snapshot steps on the regular grid (the rows of the PCA matrix, the last one being θ_T)."""
    return sorted(k for k in sling.snapshots if k == 1 or k % params["snapshot_every"] == 0)


def heatmap_grid(coords: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A grid covering the projected trajectory and θ_T (the origin) with a 10% margin."""
    axes = []
    for c in (coords[:, 0], coords[:, 1]):
        lo, hi = min(c.min(), 0.0), max(c.max(), 0.0)
        pad = 0.1 * (hi - lo) + 1e-3
        axes.append(np.linspace(lo - pad, hi + pad, size))
    return axes[0], axes[1]
