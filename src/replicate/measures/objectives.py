"""Rosenbrock and Rastrigin in log scale, and races of optimisers across them.

Notsawo et al. minimise log(g(x) + c): the logarithm turns Rosenbrock's banana valley into a
narrow ravine with a very sharp minimum, and Rastrigin's bumps into sharp local minima.
Every function takes points of shape (..., n) and returns values of shape (...).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

MINIMA = {"rosenbrock": (1.0, 1.0), "rastrigin": (0.0, 0.0)}


def rosenbrock(x: torch.Tensor) -> torch.Tensor:
    """Vanilla form: sum over pairs of 100 (x_{2i} - x_{2i-1}^2)^2 + (x_{2i-1} - 1)^2."""
    if x.shape[-1] % 2:
        raise ValueError(f"the vanilla Rosenbrock function needs an even number of coordinates, "
                         f"got {x.shape[-1]}")
    odd, even = x[..., 0::2], x[..., 1::2]
    return (100 * (even - odd**2) ** 2 + (odd - 1) ** 2).sum(-1)


def rosenbrock_grad(x: torch.Tensor) -> torch.Tensor:
    """The closed-form gradient of the vanilla form (the seed's formula)."""
    odd, even = x[..., 0::2], x[..., 1::2]
    grad = torch.empty_like(x)
    grad[..., 0::2] = -400 * odd * (even - odd**2) + 2 * (odd - 1)
    grad[..., 1::2] = 200 * (even - odd**2)
    return grad


def rosenbrock_extended(x: torch.Tensor) -> torch.Tensor:
    """The 'more involved variant': sum_i 100 (x_{i+1} - x_i^2)^2 + (x_i - 1)^2."""
    head, tail = x[..., :-1], x[..., 1:]
    return (100 * (tail - head**2) ** 2 + (head - 1) ** 2).sum(-1)


def rastrigin(x: torch.Tensor, a: float = 10.0) -> torch.Tensor:
    """n a + sum_i x_i^2 - a cos(2 pi x_i); global minimum 0 at the origin, many local ones."""
    return a * x.shape[-1] + (x**2 - a * torch.cos(2 * math.pi * x)).sum(-1)


def rastrigin_grad(x: torch.Tensor, a: float = 10.0) -> torch.Tensor:
    return 2 * x + 2 * math.pi * a * torch.sin(2 * math.pi * x)


def log_scale(g: Callable[[torch.Tensor], torch.Tensor], c: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> log(g(x) + c). c sets how sharp the minimum is: log(c) is its depth."""
    if c <= 0:
        raise ValueError(f"the offset c must be positive (log(0) is -inf), got {c}")
    return lambda x: torch.log(g(x) + c)


# PyTorch defaults, except that "momentum" is SGD with heavy-ball momentum 0.9.
OPTIMIZERS: dict[str, Callable] = {
    "sgd": lambda groups: torch.optim.SGD(groups),
    "momentum": lambda groups: torch.optim.SGD(groups, momentum=0.9),
    "rmsprop": lambda groups: torch.optim.RMSprop(groups),
    "rprop": lambda groups: torch.optim.Rprop(groups),
    "adam": lambda groups: torch.optim.Adam(groups),
    "adamax": lambda groups: torch.optim.Adamax(groups),
}


def optimizer_race(objective: Callable[[torch.Tensor], torch.Tensor], start: list[float],
                   optimizer: str, lrs: list[float], iterations: int) -> np.ndarray:
    """Minimise `objective` from `start` with one optimiser at several learning rates at once.

    Each learning rate gets its own copy of the point in its own parameter group; all six
    optimisers keep per-parameter state, so the runs do not interact and this equals running
    them one by one. Returns the positions, shape (iterations + 1, len(lrs), n), in float64.
    A run that overflows keeps non-finite positions from then on.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimiser {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    points = [torch.tensor(start, dtype=torch.float64, requires_grad=True) for _ in lrs]
    opt = OPTIMIZERS[optimizer]([{"params": [p], "lr": lr} for p, lr in zip(points, lrs)])
    path = np.empty((iterations + 1, len(lrs), len(start)))
    path[0] = np.array(start)
    for t in range(1, iterations + 1):
        opt.zero_grad(set_to_none=True)
        # Summing separate objectives gives each point exactly its own gradient.
        torch.stack([objective(p) for p in points]).sum().backward()
        opt.step()
        with torch.no_grad():
            path[t] = torch.stack(points).numpy()
    return path


def distance_to(path: np.ndarray, minimum: tuple[float, ...]) -> np.ndarray:
    """Euclidean distance of every position to `minimum`; inf where the run diverged."""
    d = np.linalg.norm(path - np.asarray(minimum), axis=-1)
    return np.where(np.isfinite(d), d, np.inf)


def double_descent(distance: np.ndarray, smooth: int = 5, min_descent: float = 0.5,
                   min_rise: float = 0.1) -> dict | None:
    """Find a double descent in one distance curve, or return None.

    On the curve smoothed over `smooth` steps: a descent of at least `min_descent` from the start
    to a local minimum m1, then a rise of at least `min_rise` above m1, then a final value
    below m1. Returns the steps and values of m1 and of the peak after it.
    """
    if not np.all(np.isfinite(distance)) or len(distance) < smooth + 2:
        return None
    curve = np.convolve(distance, np.ones(smooth) / smooth, mode="valid")
    final = curve[-1]
    # Running maximum from the right: the highest point after each step.
    peak_after = np.maximum.accumulate(curve[::-1])[::-1]
    for t in range(1, len(curve) - 1):
        is_local_min = curve[t] <= curve[t - 1] and curve[t] <= curve[t + 1]
        if not is_local_min or curve[0] - curve[t] < min_descent or final >= curve[t]:
            continue
        if peak_after[t] - curve[t] >= min_rise:
            peak = t + int(np.argmax(curve[t:]))  # final < m1 < peak, so the peak comes first
            return {"m1_step": t, "m1": float(curve[t]), "peak_step": peak,
                    "peak": float(curve[peak]), "final": float(final)}
    return None


def race_all(objective: Callable[[torch.Tensor], torch.Tensor], start: list[float],
             optimizers: list[str], lrs: list[float], iterations: int) -> dict[str, np.ndarray]:
    """`optimizer_race` for each optimiser: {name: positions of shape (iterations + 1, len(lrs), n)}."""
    return {name: optimizer_race(objective, start, name, lrs, iterations) for name in optimizers}
