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


# One update of each optimiser for a batch of points, one per row of x, each row with its own
# learning rate (lr: a column of shape (rows, 1)). These are PyTorch's update rules at its default
# settings (torch.optim, single-tensor form), except that "momentum" is SGD with heavy-ball
# momentum 0.9. Written for rows, the whole learning-rate grid of an optimiser costs one set of
# tensor operations a step instead of one per learning rate; a test holds every rule to
# torch.optim run on each learning rate alone. `state` is the optimiser's memory, empty at step 1.

def _descend(x, direction, lr):
    """x -= lr * direction, row by row, as torch.optim's SGD writes it (`add_` with alpha = -lr:
    one rounding where the CPU fuses the multiply and the add). On chaotic runs (momentum at
    large rates) a rounding apart grows to a different path, so this one step keeps the rows'
    loop, to stay bit for bit on torch.optim's path; it is a small share of the step."""
    for row, d, rate in zip(x, direction, lr[:, 0].tolist()):
        row.add_(d, alpha=-rate)


def _sgd(x, g, lr, state, step):
    _descend(x, g, lr)


def _momentum(x, g, lr, state, step):
    buf = state["buf"] = g.clone() if step == 1 else state["buf"].mul_(0.9).add_(g)
    _descend(x, buf, lr)


def _rmsprop(x, g, lr, state, step):
    square_avg = state.setdefault("square_avg", torch.zeros_like(x))
    square_avg.mul_(0.99).addcmul_(g, g, value=1 - 0.99)
    x.sub_(lr * g / square_avg.sqrt().add_(1e-8))


def _rprop(x, g, lr, state, step):
    # The step size of each coordinate grows by 1.2 while the gradient keeps its sign and halves
    # when it flips (the update is then skipped), within [1e-6, 50]; it starts at lr.
    prev = state.setdefault("prev", torch.zeros_like(x))
    step_size = state.setdefault("step_size", lr.expand_as(x).clone())
    sign = (g * prev).sign()
    factor = torch.ones_like(x)  # (torch.where would take 1.2 as a float32 scalar)
    factor[sign > 0], factor[sign < 0] = 1.2, 0.5
    step_size.mul_(factor).clamp_(1e-6, 50)
    g = g.clone()
    g[sign < 0] = 0.0
    x.sub_(g.sign() * step_size)
    prev.copy_(g)


def _adam(x, g, lr, state, step):
    exp_avg = state.setdefault("exp_avg", torch.zeros_like(x)).lerp_(g, 1 - 0.9)
    exp_avg_sq = state.setdefault("exp_avg_sq", torch.zeros_like(x))
    exp_avg_sq.mul_(0.999).addcmul_(g, g, value=1 - 0.999)
    denom = (exp_avg_sq.sqrt() / (1 - 0.999 ** step) ** 0.5).add_(1e-8)
    x.sub_(lr / (1 - 0.9 ** step) * exp_avg / denom)


def _adamax(x, g, lr, state, step):
    exp_avg = state.setdefault("exp_avg", torch.zeros_like(x)).lerp_(g, 1 - 0.9)
    exp_inf = state.setdefault("exp_inf", torch.zeros_like(x))
    torch.maximum(exp_inf.mul_(0.999), g.abs().add_(1e-8), out=exp_inf)
    x.sub_(lr / (1 - 0.9 ** step) * exp_avg / exp_inf)


OPTIMIZERS: dict[str, Callable] = {"sgd": _sgd, "momentum": _momentum, "rmsprop": _rmsprop,
                                   "rprop": _rprop, "adam": _adam, "adamax": _adamax}


def optimizer_race(objective: Callable[[torch.Tensor], torch.Tensor], start: list[float],
                   optimizer: str, lrs: list[float], iterations: int) -> np.ndarray:
    """Minimise `objective` from `start` with one optimiser at several learning rates at once.

    Each learning rate moves its own copy of the point, one row of a (len(lrs), n) tensor; every
    operation of the objective and of the update acts on each row alone, so the runs do not
    interact and this equals running them one by one. Returns the positions, shape
    (iterations + 1, len(lrs), n), in float64. A run that overflows keeps non-finite positions
    from then on.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimiser {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    update, state = OPTIMIZERS[optimizer], {}
    lr = torch.tensor(lrs, dtype=torch.float64)[:, None]
    points = torch.tensor([start] * len(lrs), dtype=torch.float64)
    path = np.empty((iterations + 1, len(lrs), len(start)))
    path[0] = np.array(start)
    for t in range(1, iterations + 1):
        points.requires_grad_(True)
        # The sum's gradient with respect to each row is that row's own gradient.
        (grad,) = torch.autograd.grad(objective(points).sum(), points)
        points = points.detach()
        update(points, grad, lr, state, t)
        path[t] = points.numpy()
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
