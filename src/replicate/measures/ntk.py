"""The empirical neural tangent kernel (NTK) on a fixed set of points, and how far it moves.

K(x, x') = sum_i < d f_i(x) / d theta, d f_i(x') / d theta >, the kernel that governs gradient
descent on the outputs to first order (Jacot et al.). In the lazy / kernel regime it stays at its
initial value during training; when the network learns features it moves. We measure that by
||K_t - K_0||_F / ||K_0||_F on the same points at every checkpoint.

Per-point parameter gradients come from `torch.func` (vmap over `grad` of a functional call), so
the whole n x P gradient matrix is one vectorised computation. Measures only.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from ..runtime import costed


def parameter_gradients(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """d f(x_n) / d theta for every point, flattened: shape (n, k, P) for k outputs."""
    params = {name: p.detach() for name, p in model.named_parameters()}

    def f(theta, point):
        return functional_call(model, theta, (point.unsqueeze(0),)).reshape(-1)

    grads = vmap(jacrev(f), in_dims=(None, 0))(params, x)  # name -> (n, k, *shape)
    return torch.cat([g.flatten(2) for g in grads.values()], dim=2)


@costed("empirical NTK")
def empirical_ntk(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The n x n empirical NTK on the points x, summed over the outputs (the trace kernel)."""
    g = parameter_gradients(model, x)
    n = len(x)
    g = g.transpose(0, 1)  # (k, n, P)
    return torch.einsum("knp,kmp->nm", g, g).reshape(n, n)


def relative_change(kernel: torch.Tensor, initial: torch.Tensor) -> float:
    """||K - K_0||_F / ||K_0||_F."""
    return float((kernel - initial).norm() / initial.norm())


def kernel_alignment(a: torch.Tensor, b: torch.Tensor) -> float:
    """<A, B>_F / (||A||_F ||B||_F): 1 when two kernels differ only by a positive factor."""
    return float((a * b).sum() / (a.norm() * b.norm()))
