"""l_inf PGD adversarial examples, robust accuracy, and the "delayed robustness" bookkeeping.

PGD (Madry et al.): from a random start in the eps-ball around x0, repeat
    x <- clip_[lo, hi]( x0 + clip_[-eps, eps]( x + alpha * sign(grad_x CE(f(x), y)) - x0 ) )
so every iterate stays in the eps-ball and in the data range [lo, hi] (pixels in [0, 1]).

Several eps values are attacked in one batch (the points repeated once per eps), which is how a
chapter evaluates a whole list of eps at a checkpoint in a single pass.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from ..runtime import costed


@contextmanager
def _frozen(model: nn.Module):
    """No gradients for the parameters during the attack (only the input's are needed)."""
    flags = [p.requires_grad for p in model.parameters()]
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)


def _sign_steps(model: nn.Module, adv: torch.Tensor, y: torch.Tensor, lower: torch.Tensor,
                upper: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    """`steps` steps of size `alpha` along the sign of the summed cross-entropy's input gradient,
    each clamped to the box [lower, upper], in place."""
    with _frozen(model):
        for _ in range(steps):
            adv.requires_grad_(True)
            loss = nn.functional.cross_entropy(model(adv), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, adv)
            with torch.no_grad():
                adv = adv.detach().add_(grad.sign_(), alpha=alpha).clamp_(lower, upper)
    return adv.detach()


def pgd_linf(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps, alpha: float, steps: int,
             random_start: bool = True, data_range: tuple[float, float] = (0.0, 1.0),
             seed: int = 0, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Adversarial versions of `x` (labels `y`) within l_inf distance `eps`, after `steps` PGD steps.

    `eps` is a float or a tensor broadcastable against `x` (one eps per row, for batched eps).
    `rows`, a boolean mask over the rows of `x`, attacks only those rows and returns the others
    unchanged. The random start is drawn for every row all the same, so that a row's attack does
    not depend on which other rows are attacked.

    The eps-ball and the data range together are one box per pixel, [max(x0 - eps, lo),
    min(x0 + eps, hi)], never empty as x0 lies in the data range; a step is the sign step and one
    clamp to it, in place: the same numbers as clipping to the ball and then to the range, in
    fewer passes over the batch (what a step costs beyond the network's matrix products).
    """
    lo, hi = data_range
    x0 = x.detach()
    eps = torch.as_tensor(eps, dtype=x0.dtype, device=x0.device)
    if eps.dim() == 1:
        eps = eps.reshape(-1, *([1] * (x0.dim() - 1)))
    lower, upper = (x0 - eps).clamp(min=lo), (x0 + eps).clamp(max=hi)
    if random_start:
        gen = torch.Generator(device=x0.device).manual_seed(seed)
        noise = torch.rand(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype)
        start = (x0 + (2 * noise - 1) * eps).clamp(lo, hi)
    else:
        start = x0.clone()
    if rows is None:
        return _sign_steps(model, start, y, lower, upper, alpha, steps)
    adv = x0.clone()
    adv[rows] = _sign_steps(model, start[rows], y[rows], lower[rows], upper[rows], alpha, steps)
    return adv


@costed("adversarial accuracy (PGD)")
def robust_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epsilons: list[float],
                    alpha: float, steps: int, random_start: bool = True,
                    data_range: tuple[float, float] = (0.0, 1.0), seed: int = 0) -> dict[float, float]:
    """Accuracy under PGD at each eps: the fraction classified correctly both clean and attacked.

    A point the model already gets wrong counts as broken at every eps, so robust accuracy never
    exceeds clean accuracy, and it is not attacked: the points it gets right are attacked as they
    would be in one batch with the others (see `pgd_linf`'s `rows`).
    """
    param = next(model.parameters())
    x, y = x.to(param.device, param.dtype), y.to(param.device)
    n = len(y)
    with torch.no_grad():
        clean_ok = model(x).argmax(1) == y
    eps_rows = torch.tensor(epsilons, dtype=param.dtype, device=param.device).repeat_interleave(n)
    repeats = (len(epsilons), *([1] * (x.dim() - 1)))
    adv = pgd_linf(model, x.repeat(repeats), y.repeat(len(epsilons)), eps_rows, alpha, steps,
                   random_start, data_range, seed, rows=clean_ok.repeat(len(epsilons)))
    with torch.no_grad():
        adv_ok = (model(adv).argmax(1) == y.repeat(len(epsilons))).reshape(len(epsilons), n)
    robust = (adv_ok & clean_ok).float().mean(1)
    return {float(e): float(a) for e, a in zip(epsilons, robust)}


def settling_index(accuracy: np.ndarray, tolerance: float = 0.01) -> int:
    """The first checkpoint at which `accuracy` comes within `tolerance` of its final value.

    (Not "stays within": a slow drift late in training should not move the settling point.)
    """
    accuracy = np.asarray(accuracy, dtype=float)
    return int(np.flatnonzero(np.abs(accuracy - accuracy[-1]) <= tolerance)[0])


def first_index_above(values: np.ndarray, threshold: float, start: int = 0) -> int | None:
    """The first index >= `start` where `values` exceeds `threshold`, or None."""
    hits = np.flatnonzero(np.asarray(values, dtype=float)[start:] > threshold)
    return int(start + hits[0]) if hits.size else None
