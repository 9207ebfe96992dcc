"""Input Jacobians of a network, centroids, centroid alignment and the GrokAlign regulariser.

For a network f: R^d -> R^k and a point x, the input Jacobian J(x) is the k x d matrix of
d f_i / d x_j. GrokAlign (Walker et al.) calls the sum of its rows, c(x) = J(x)^T 1, the
*centroid* at x, and the cosine between c(x) and x the *centroid alignment*.

Everything here works on a batch of points, one Jacobian per point. The networks we use have no
batch-coupling layers (no batch norm), so the gradient of sum_n <v_n, f(x_n)> with respect to the
batch is exactly the stack of per-point products J(x_n)^T v_n: one backward pass gives all of
them, and the k x d Jacobian is never built (except by `input_jacobian`, for checks).

Measures only: nothing here imports the training loop.
"""
from __future__ import annotations

import torch
from torch import nn


def _vjp(model: nn.Module, x: torch.Tensor, v: torch.Tensor | None, create_graph: bool = False
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(x), J(x)^T v) for a batch x of shape (n, d); v has f's output shape (None means ones)."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        out = model(x)
        v = torch.ones_like(out) if v is None else v
        (product,) = torch.autograd.grad(out, x, grad_outputs=v, create_graph=create_graph)
    return out, product


def input_jacobian(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The full input Jacobians, shape (n, k, d) (k = 1 for a scalar output). For checks and
    small output dimensions: it costs one backward pass per output."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        out = model(x)
        out = out.reshape(len(x), -1)
        rows = [torch.autograd.grad(out[:, i].sum(), x, retain_graph=True)[0] for i in range(out.shape[1])]
    return torch.stack(rows, dim=1).reshape(len(x), out.shape[1], -1)


def centroids(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """c(x) = J(x)^T 1 for every point of the batch, shape (n, d), by one vector-Jacobian product.

    (The GrokAlign text says "Jacobian vector product"; summing the rows of J is a product of J
    with the ones vector from the *left*, which reverse-mode autodiff gives in one pass.)
    """
    return _vjp(model, x, None)[1].reshape(len(x), -1).detach()


def centroid_statistics(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per point: the output f(x), the inner product <c(x), x>, the alignment cos(c(x), x) and the
    centroid norm ||c(x)||. All of shape (n,) (the output summed over its k entries)."""
    out, c = _vjp(model, x, None)
    c = c.reshape(len(x), -1).detach()
    flat = x.reshape(len(x), -1)
    inner = (c * flat).sum(1)
    norm = c.norm(dim=1)
    cosine = inner / (norm * flat.norm(dim=1)).clamp_min(1e-12)
    return {"output": out.detach().reshape(len(x), -1).sum(1), "inner": inner, "cosine": cosine,
            "norm": norm}


def frobenius_norm_exact(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """||J(x)||_F for every point of the batch, from the full Jacobian; shape (n,)."""
    return input_jacobian(model, x).flatten(1).norm(dim=1)


def frobenius_sq_estimate(model: nn.Module, x: torch.Tensor, projections: int = 1,
                          generator: torch.Generator | None = None, create_graph: bool = False
                          ) -> torch.Tensor:
    """An unbiased estimate of ||J(x)||_F^2 for every point, shape (n,).

    For v with E[v v^T] = I (here Rademacher, entries +-1), E ||J^T v||^2 = tr(J J^T) = ||J||_F^2
    (Hutchinson's trick). Each projection costs one backward pass whatever the output dimension.
    With `create_graph`, the estimate can itself be differentiated (for a regulariser).
    """
    if projections < 1:
        raise ValueError(f"projections must be >= 1, got {projections}")
    total = 0.0
    for _ in range(projections):
        with torch.no_grad():
            shape = model(x[:1]).shape[1:]
        signs = torch.randint(0, 2, (len(x), *shape), generator=generator).to(x.device, x.dtype)
        v = 2 * signs - 1
        _, jtv = _vjp(model, x, v, create_graph=create_graph)
        total = total + jtv.reshape(len(x), -1).pow(2).sum(1)
    return total / projections


def grokalign_penalty(model: nn.Module, x: torch.Tensor, projections: int = 1,
                      generator: torch.Generator | None = None, eps: float = 1e-12) -> torch.Tensor:
    """The GrokAlign regulariser: mean over the batch of ||J(x)||_F, estimated by projections,
    differentiable with respect to the parameters (add lambda times it to the loss).

    The square root of an unbiased estimate of ||J||_F^2 slightly underestimates ||J||_F (Jensen);
    the reference code makes the same choice, and for a scalar output the estimate is exact.
    `eps` keeps the square root's gradient finite where the Jacobian vanishes.
    """
    sq = frobenius_sq_estimate(model, x, projections, generator, create_graph=True)
    return (sq + eps).sqrt().mean()
