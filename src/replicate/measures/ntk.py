"""The empirical neural tangent kernel (NTK) on a fixed set of points, and how far it moves.

K(x, x') = sum_i < d f_i(x) / d theta, d f_i(x') / d theta >, the kernel that governs gradient
descent on the outputs to first order (Jacot et al.). In the lazy / kernel regime it stays at its
initial value during training; when the network learns features it moves. We measure that by
||K_t - K_0||_F / ||K_0||_F on the same points at every checkpoint.

Per-point parameter gradients come from `torch.func` (vmap over `grad` of a functional call), so
the whole n x P gradient matrix is one vectorised computation. For our `MLP` the kernel needs no
such matrix: a Linear layer's weight gradient at one point is the outer product of the gradient
at its output and its input, so each layer adds (D D^T) * (A A^T) (elementwise), with n x n
matrices made from the layer's inputs A and output gradients D. Measures only.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from ..models import MLP
from ..runtime import costed


def parameter_gradients(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """d f(x_n) / d theta for every point, flattened: shape (n, k, P) for k outputs."""
    params = {name: p.detach() for name, p in model.named_parameters()}

    def f(theta, point):
        return functional_call(model, theta, (point.unsqueeze(0),)).reshape(-1)

    grads = vmap(jacrev(f), in_dims=(None, 0))(params, x)  # name -> (n, k, *shape)
    return torch.cat([g.flatten(2) for g in grads.values()], dim=2)


def mlp_ntk(model: MLP, x: torch.Tensor) -> torch.Tensor:
    """The trace kernel of `empirical_ntk` for our `MLP`, layer by layer: with A the inputs of a
    Linear layer (n x in) and D the gradients of one output at its outputs (n x out), the layer's
    weights add (D D^T) * (A A^T) and its bias D D^T; summed over layers and outputs. One forward
    and one backward per output; no per-point gradient is formed."""
    inputs, outputs, h = [], [], x
    for i, layer in enumerate(model.layers):
        inputs.append(h)
        outputs.append(layer(h))
        h = model.act(outputs[-1]) if i < len(model.layers) - 1 else outputs[-1]
    grams = [a @ a.T + (1 if layer.bias is not None else 0)
             for a, layer in zip(inputs, model.layers)]
    kernel = x.new_zeros(len(x), len(x))
    for k in range(h.shape[1]):
        deltas = torch.autograd.grad(h[:, k].sum(), outputs, retain_graph=k + 1 < h.shape[1])
        for delta, gram in zip(deltas, grams):
            kernel += (delta @ delta.T) * gram
    return kernel.detach()


@costed("empirical NTK")
def empirical_ntk(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The n x n empirical NTK on the points x, summed over the outputs (the trace kernel). Our
    `MLP` takes `mlp_ntk`; any other model contracts its per-point parameter gradients."""
    if isinstance(model, MLP):
        return mlp_ntk(model, x)
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
