"""Progress measures side by side: when does a measure move, and how long before generalisation?

Chapter 09 follows many measures (local complexity, centroid alignment, the Hessian's top
eigenvalue, intrinsic dimension, ...) along the same training runs. To compare them it needs one
rule, fixed before any run, that turns a curve into the step at which it "moved":

- its **onset** is the step at which the measure has first made half of its total move between
  memorisation (step t2, its value there) and the end of the run (its value after
  generalisation), read between checkpoints by linear interpolation in log(1 + step), the scale
  the checkpoints are spaced on;
- a measure whose total move is smaller than a stated share of its size never moved: no onset;
- its **lead** is t4 - onset (t4: generalisation), in steps and as a share of t4 - t2; a positive
  lead means the measure moved before the network generalised.

Two measures from outside the three papers give the comparison its baseline: the norm of the
weights (Liu et al., Omnigrok) and, for modular addition, how much of the token embedding's
energy sits in a few Fourier frequencies (Nanda et al., progress measures).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


# --- the onset rule ---------------------------------------------------------------------------

def _log_step(step) -> np.ndarray:
    return np.log1p(np.asarray(step, dtype=float))


def value_at(steps, values, step: float) -> float:
    """The curve read at `step`, by linear interpolation in log(1 + step) between checkpoints."""
    return float(np.interp(_log_step(step), _log_step(steps), np.asarray(values, dtype=float)))


@dataclass
class Onset:
    """Where a curve made half its move from t2 to its end (None: it did not move enough)."""
    step: float | None
    start: float  # the value at t2
    end: float    # the value at the last checkpoint
    move: float   # end - start

    @property
    def moved(self) -> bool:
        return self.step is not None


def onset(steps, values, t2: float, fraction: float = 0.5, min_relative_move: float = 0.05) -> Onset:
    """The first step >= t2 at which the curve has made `fraction` of its move from its value
    at t2 to its value at the last checkpoint.

    The move counts only when |end - start| >= `min_relative_move` x max(|start|, |end|);
    otherwise the measure did not move and the onset is None. Between checkpoints the curve is
    linear in log(1 + step), and so is the crossing.
    """
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if steps.ndim != 1 or steps.shape != values.shape or len(steps) < 2:
        raise ValueError("steps and values must be 1-D, of the same length, at least 2")
    if np.any(np.diff(steps) <= 0):
        raise ValueError("steps must increase")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    if not steps[0] <= t2 <= steps[-1]:
        raise ValueError(f"t2 = {t2} lies outside the checkpoints [{steps[0]:g}, {steps[-1]:g}]")
    start, end = value_at(steps, values, t2), float(values[-1])
    move = end - start
    scale = max(abs(start), abs(end))
    if not math.isfinite(move) or abs(move) < min_relative_move * scale or move == 0:
        return Onset(None, start, end, move)
    # The curve from t2 on, with t2 itself as its first point; progress towards the end value.
    after = steps > t2
    xs = np.concatenate([[_log_step(t2)], _log_step(steps[after])])
    progress = (np.concatenate([[start], values[after]]) - start) / move
    # The first point at or past the level exists (the last has progress 1) and is not t2's
    # (progress 0 < fraction).
    hit = int(np.flatnonzero(progress >= fraction)[0])
    x0, x1, p0, p1 = xs[hit - 1], xs[hit], progress[hit - 1], progress[hit]
    x = x0 + (fraction - p0) / (p1 - p0) * (x1 - x0)
    return Onset(float(np.expm1(x)), start, end, move)


def lead_time(t4: float, onset_step: float | None, t2: float) -> tuple[float | None, float | None]:
    """(t4 - onset, (t4 - onset) / (t4 - t2)): how long before generalisation the measure moved,
    in steps and as a share of the memorisation-to-generalisation gap (None without an onset)."""
    if onset_step is None:
        return None, None
    lead = float(t4 - onset_step)
    gap = float(t4 - t2)
    return lead, (lead / gap if gap > 0 else None)


# --- two baseline measures --------------------------------------------------------------------

def weight_norm(model: nn.Module) -> float:
    """The Euclidean norm of all parameters together (Omnigrok's measure of grokking)."""
    with torch.no_grad():
        return float(torch.sqrt(sum((p.detach().double() ** 2).sum() for p in model.parameters())))


def fourier_energy(embedding: torch.Tensor) -> np.ndarray:
    """The energy of a token embedding (p, d) at each frequency k = 1 .. floor(p / 2) of the
    discrete Fourier transform along the tokens: sum over the d columns of |X_k|^2, with k and
    p - k (the same real wave) counted together. Frequency 0, the mean over tokens, is left out:
    it carries no information about which residue a token is."""
    e = embedding.detach().to(torch.float64).cpu()
    p = e.shape[0]
    power = (torch.fft.fft(e, dim=0).abs() ** 2).sum(dim=1).numpy()  # (p,)
    half = p // 2
    energy = power[1:half + 1].copy()
    mirrored = p - np.arange(1, half + 1)  # index of p - k for each k
    distinct = mirrored != np.arange(1, half + 1)  # k = p/2 (p even) is its own mirror
    energy[distinct] += power[mirrored[distinct]]
    return energy


def fourier_sparsity(embedding: torch.Tensor, top: int = 5) -> float:
    """The share of a token embedding's energy (frequency 0 left out) in its `top` strongest
    frequencies: 1 when the embedding is made of at most `top` waves, about top / (p / 2) for a
    random embedding. Nanda et al. find that a network that groks modular addition ends with a
    few key frequencies."""
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    energy = fourier_energy(embedding)
    total = energy.sum()
    if total <= 0:
        return float("nan")
    return float(np.sort(energy)[::-1][:top].sum() / total)
