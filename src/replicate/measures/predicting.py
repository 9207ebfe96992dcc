"""Predicting grokking from the first steps: the spectral signature of the early training loss,
the ROC/AUROC of a score as a predictor of an outcome, and the t4(r) + epsilon stopping rule.

Spectral conventions (N samples, one per training step, frequencies in cycles per step):
- `amplitude_spectrum`: |X_k| / N, doubled for 0 < k < N/2, so that a tone
  A sin(2 pi k t / N + phi) has amplitude A at frequency k / N and a constant c has amplitude c
  at frequency 0.
- `periodogram`: |X_k|^2 / N; for white noise of variance s^2 its expectation is s^2 at every
  frequency (a flat spectrum).
- Hjorth's activity of a signal is its variance. `low_frequency_activity` is the activity of the
  part of the signal at frequencies 0 < f <= cutoff: by Parseval it is the sum of A_k^2 / 2 over
  those frequencies (A_k the amplitude spectrum; A_k^2 at the Nyquist frequency).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


# --- the spectral signature -------------------------------------------------------------------

def detrend(x, degree: int = 1) -> np.ndarray:
    """`x` minus its least-squares polynomial of `degree` in the step index (0: the mean)."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or len(x) <= degree:
        raise ValueError(f"need a 1-D signal longer than the degree ({degree}), "
                         f"got shape {x.shape}")
    if degree < 0:
        raise ValueError(f"degree must be >= 0, got {degree}")
    t = np.linspace(-1.0, 1.0, len(x))  # well conditioned for any length
    coef = np.polynomial.polynomial.polyfit(t, x, degree)
    return x - np.polynomial.polynomial.polyval(t, coef)


def amplitude_spectrum(x) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies (cycles per sample) and the one-sided amplitude spectrum of a real signal."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    amp = np.abs(np.fft.rfft(x)) / n
    amp[1:(n + 1) // 2] *= 2  # every k with 0 < k < n/2 has its mirror image at n - k
    return np.fft.rfftfreq(n), amp


def periodogram(x) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies and |X_k|^2 / N (flat, equal to the variance, in expectation for white noise)."""
    x = np.asarray(x, dtype=float)
    return np.fft.rfftfreq(len(x)), np.abs(np.fft.rfft(x)) ** 2 / len(x)


def hjorth_activity(x) -> float:
    """Hjorth's activity: the variance of the signal."""
    return float(np.var(np.asarray(x, dtype=float)))


def low_frequency_activity(x, cutoff: float) -> float:
    """The variance (Hjorth activity) of the components of `x` with 0 < frequency <= cutoff."""
    if not cutoff > 0:
        raise ValueError(f"cutoff must be positive (cycles per step), got {cutoff}")
    x = np.asarray(x, dtype=float)
    freqs, amp = amplitude_spectrum(x)
    band = (freqs > 0) & (freqs <= cutoff)
    power = amp ** 2 / 2
    if len(x) % 2 == 0:
        power[-1] = amp[-1] ** 2  # the Nyquist term is not doubled, and cos^2 averages to 1 there
    return float(power[band].sum())


def early_window(loss, start: int, steps: int) -> np.ndarray:
    """log10 of the training loss at steps start + 1, ..., start + steps (index t - 1 = step t)."""
    loss = np.asarray(loss, dtype=float)
    if start < 0 or steps < 8:
        raise ValueError(f"need start >= 0 and steps >= 8, got start={start}, steps={steps}")
    if len(loss) < start + steps:
        raise ValueError(f"the loss curve has {len(loss)} steps; the window needs start + steps = "
                         f"{start + steps}")
    return np.log10(np.maximum(loss[start:start + steps], 1e-30))


def spectral_signature(loss, start: int, steps: int, cutoff: float, degree: int = 3) -> float:
    """The spectral signature of an early training-loss curve.

    Take log10 of the loss over `steps` steps after step `start` (the loss falls by orders of
    magnitude, and oscillations are multiplicative), remove its least-squares polynomial trend of
    `degree`, and return the Hjorth activity of what remains at frequencies 0 < f <= `cutoff`
    (cycles per step): the energy of the slow oscillations around the trend.
    """
    return low_frequency_activity(detrend(early_window(loss, start, steps), degree), cutoff)


# --- ROC and AUROC ----------------------------------------------------------------------------

def _scores_labels(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float)
    labels = np.asarray(labels).astype(bool)
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError("scores and labels must be 1-D and of the same length")
    if labels.all() or not labels.any():
        raise ValueError("AUROC needs both positive and negative examples")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite")
    return scores, labels


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """False- and true-positive rates of the rule `score >= threshold`, for every distinct score
    as threshold (descending), starting at (0, 0) with threshold +inf. Tied scores move the curve
    diagonally, so the area under it counts a tie as half a correct ordering."""
    scores, labels = _scores_labels(scores, labels)
    thresholds = np.unique(scores)[::-1]
    tpr = np.array([0.0] + [(scores[labels] >= c).mean() for c in thresholds])
    fpr = np.array([0.0] + [(scores[~labels] >= c).mean() for c in thresholds])
    return fpr, tpr, np.r_[np.inf, thresholds]


def auroc(scores, labels) -> float:
    """P(score of a positive > score of a negative) + P(equal) / 2 (the Mann-Whitney statistic)."""
    scores, labels = _scores_labels(scores, labels)
    pos, neg = scores[labels][:, None], scores[~labels][None, :]
    return float(((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size))


def bootstrap_auroc(scores, labels, n_boot: int = 2000, level: float = 0.95,
                    seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUROC; positives and negatives are resampled
    separately (each with replacement, at its own count), so every resample has both."""
    scores, labels = _scores_labels(scores, labels)
    gen = np.random.default_rng(seed)
    pos, neg = scores[labels], scores[~labels]
    values = np.empty(n_boot)
    for i in range(n_boot):
        p = gen.choice(pos, len(pos))[:, None]
        n = gen.choice(neg, len(neg))[None, :]
        values[i] = ((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size)
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


# --- outcomes, the stopping rule, the learning-rate threshold ---------------------------------

def label_run(val_acc, threshold: float = 0.99, rise: float = 0.05,
              window: float = 0.1) -> tuple[str, int | None]:
    """The outcome of a run from its validation-accuracy curve (index t - 1 = step t).

    "grokked" (with t4, the first step at or above `threshold`) if it reaches the threshold;
    otherwise "undecided" when it is still climbing at the end, i.e. its mean over the last
    `window` of the steps exceeds its mean over the window that ends at three quarters of the
    steps by more than `rise`; otherwise "not grokked".
    """
    acc = np.asarray(val_acc, dtype=float)
    hits = np.flatnonzero(acc >= threshold)
    if len(hits):
        return "grokked", int(hits[0]) + 1
    n = len(acc)
    w = max(1, int(round(window * n)))
    three_quarters = max(w, int(round(0.75 * n)))
    if acc[-w:].mean() - acc[three_quarters - w:three_quarters].mean() > rise:
        return "undecided", None
    return "not grokked", None


def stopping_rule(runs: Sequence[dict[str, Any]], law, epsilon: float = 1000,
                  horizon: float = 3.0) -> dict[str, Any]:
    """Apply "train for t4(r) + epsilon steps; no generalisation by then -> stop" to `runs`.

    Each run is a dict with `r` (in the unit `law` was fitted in), `t4` (first step that
    generalised, or None) and `steps` (the steps it was trained for, its own budget). The rule's
    budget is ceil(law(r) + epsilon). A stopped run is an error when it generalises within
    `horizon` times the rule's budget; when the run was not trained that long and had not
    generalised, the error is unknown (None). Without the rule each run trains until it
    generalises or its own budget ends; `saved` is what the rule takes off that.
    """
    out = []
    for run in runs:
        t4, steps = run["t4"], int(run["steps"])
        budget = int(math.ceil(float(law(run["r"])) + epsilon))
        without = min(t4, steps) if t4 is not None else steps
        stopped = t4 is None or t4 > budget
        if not stopped:
            error = False
        elif t4 is not None and t4 <= horizon * budget:
            error = True
        elif t4 is None and steps < horizon * budget:
            error = None
        else:
            error = False
        saved = max(without - budget, 0) if stopped else 0
        out.append({**run, "budget": budget, "stopped": stopped, "error": error, "saved": saved})
    n_stopped = sum(o["stopped"] for o in out)
    unknown = sum(o["error"] is None for o in out)
    errors = sum(o["error"] is True for o in out)
    judged = n_stopped - unknown
    return {"runs": out, "stopped": n_stopped, "errors": errors, "unknown": unknown,
            "error_rate": errors / judged if judged else float("nan"),
            "steps_saved": sum(o["saved"] for o in out),
            "steps_without_rule": sum(min(o["t4"], o["steps"]) if o["t4"] is not None
                                      else o["steps"] for o in out)}


def lr_threshold(lrs: Sequence[float], t4s: Sequence[int | None]) -> dict[str, Any]:
    """Walk up the learning rates while t4 falls (a run that does not generalise counts as
    t4 = infinity). `falls`: t4 fell at least once; `best_lr`: the last rate before it stopped
    falling; `threshold`: the first rate at which the run then generalises later or not at all
    (None if t4 falls all the way up the grid)."""
    if len(lrs) != len(t4s) or len(lrs) < 2:
        raise ValueError("need at least two learning rates, each with its t4 (None if none)")
    if list(lrs) != sorted(lrs):
        raise ValueError("learning rates must be increasing")
    t = [math.inf if v is None else float(v) for v in t4s]
    i = 0
    while i + 1 < len(t) and t[i + 1] < t[i]:
        i += 1
    if math.isinf(t[i]):
        return {"falls": False, "best_lr": None, "worse_beyond": False, "threshold": None}
    worse = i + 1 < len(t)
    return {"falls": i > 0, "best_lr": lrs[i], "worse_beyond": worse,
            "threshold": lrs[i + 1] if worse else None}
