"""APGD (Croce and Hein 2020): PGD that sets its own step size, the first attack of AutoAttack.

l_inf, cross-entropy (APGD-CE). Every point keeps its own step size, starting at 2 eps. A step
moves along the sign of the gradient, then adds momentum (0.75 of the new point, 0.25 of the
last move), both projected onto the eps-ball within the data range. At checkpoints at 0.22,
0.41, 0.57, ... of the budget, a point halves its step size and restarts from the highest-loss
iterate it has seen when fewer than 75% of the steps since the last checkpoint raised its loss,
or when neither its step size nor its best loss changed since then. As in AutoAttack, a point
counts as broken when any iterate is misclassified; the attack returns, per point, the first
misclassified iterate, or the highest-loss one for a point that held.

Measures only: the model is left as it was (eval mode is the caller's choice).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..runtime import costed
from .adversarial import _frozen


def checkpoints(steps: int) -> list[int]:
    """The iterations at which the step sizes are reconsidered: ceil(p_j steps) with p_0 = 0,
    p_1 = 0.22 and p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06), below `steps`."""
    p = [0.0, 0.22]
    while p[-1] < 1:
        p.append(p[-1] + max(p[-1] - p[-2] - 0.03, 0.06))
    marks = {math.ceil(round(q * steps, 9)) for q in p[1:]}  # round: 0.22 + 0.19 is not 0.41
    return sorted(m for m in marks if m < steps)


@costed("adversarial accuracy (APGD)")
def apgd_linf(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int = 100,
              data_range: tuple[float, float] = (0.0, 1.0), rho: float = 0.75,
              momentum: float = 0.75, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(adversarial points, broken) for the points `x` with labels `y`: APGD-CE with `steps`
    gradient steps from a random start in the eps-ball (seeded). `broken[i]` is True when some
    iterate of point i (the start included) was misclassified."""
    lo, hi = data_range
    x0 = x.detach()
    floor, ceiling = (x0 - eps).clamp(min=lo), (x0 + eps).clamp(max=hi)
    project = lambda z: torch.maximum(torch.minimum(z, ceiling), floor)  # noqa: E731
    gen = torch.Generator(device=x0.device).manual_seed(seed)
    start = 2 * torch.rand(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype) - 1
    shape = (-1,) + (1,) * (x0.dim() - 1)  # one value per point, broadcast over its pixels
    with _frozen(model):

        def loss_and_gradient(z: torch.Tensor):
            z = z.clone().requires_grad_(True)
            logits = model(z)
            losses = nn.functional.cross_entropy(logits, y, reduction="none")
            (grad,) = torch.autograd.grad(losses.sum(), z)
            return losses.detach(), grad, logits.argmax(1) != y

        current = project(x0 + eps * start)
        loss, grad, wrong = loss_and_gradient(current)
        broken, found = wrong.clone(), current.clone()
        best_loss, best, best_grad = loss.clone(), current.clone(), grad.clone()
        step = torch.full((len(x0),), 2.0 * eps, dtype=x0.dtype, device=x0.device)
        marks = checkpoints(steps)
        last_mark, step_at_mark, best_at_mark = 0, step.clone(), best_loss.clone()
        rises = torch.zeros(len(x0), device=x0.device)
        previous = current
        for k in range(steps):
            z = project(current + step.view(shape) * grad.sign())
            if k == 0:  # the first step has no move to carry on
                moved = z
            else:
                moved = project(current + momentum * (z - current)
                                + (1 - momentum) * (current - previous))
            previous, current = current, moved
            new_loss, grad, wrong = loss_and_gradient(current)
            newly = wrong & ~broken
            found[newly], broken = current[newly], broken | wrong
            rises += (new_loss > loss).to(rises.dtype)
            loss = new_loss
            better = loss > best_loss
            best[better], best_grad[better] = current[better], grad[better]
            best_loss = torch.where(better, loss, best_loss)
            if k + 1 in marks:
                mark = k + 1
                slow = rises < rho * (mark - last_mark)
                stuck = (step == step_at_mark) & (best_loss == best_at_mark)
                halve = slow | stuck
                step = torch.where(halve, step / 2, step)
                # A point that halves its step restarts from its best iterate, without momentum.
                back = halve.view(shape)
                current = torch.where(back, best, current)
                previous = torch.where(back, current, previous)
                grad = torch.where(back, best_grad, grad)
                loss = torch.where(halve, best_loss, loss)
                last_mark, step_at_mark, best_at_mark = mark, step.clone(), best_loss.clone()
                rises.zero_()
    adversarial = torch.where(broken.view(shape), found, best)
    return adversarial.detach(), broken


def apgd_robust_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float,
                         steps: int = 100, data_range: tuple[float, float] = (0.0, 1.0),
                         seed: int = 0) -> float:
    """The share of points classified correctly clean and at every APGD iterate."""
    param = next(model.parameters())
    x, y = x.to(param.device, param.dtype), y.to(param.device)
    with torch.no_grad():
        clean_ok = model(x).argmax(1) == y
    _, broken = apgd_linf(model, x, y, eps, steps, data_range, seed=seed)
    return float((clean_ok & ~broken).float().mean())
