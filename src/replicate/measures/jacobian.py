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


# ----------------------------------------------------------------------------------------------
# The cheap estimator: a probe pushed forward through the masked linear network.
#
# For a ReLU MLP, J(x) = W_L D_{L-1}(x) W_{L-1} ... D_1(x) W_1, with D_l(x) the 0/1 diagonal of the
# activation pattern at x (biases do not enter). So J(x) u is the network's linear pass on u with
# the biases dropped and x's activation pattern applied: no second-order graph, and the pattern is
# piecewise constant in the parameters, so an ordinary backward differentiates it exactly. With
# probes u shared by the whole batch, the first (widest) layer's extra work is W_1 u, one
# matrix-vector product; the per-point work is confined to the narrow layers.


def _relu_layers(model: nn.Module) -> list[nn.Linear]:
    layers = getattr(model, "layers", None)
    if layers is None or not isinstance(getattr(model, "act", None), nn.ReLU):
        raise TypeError("the masked linear pass needs a ReLU MLP with `layers` and `act` (models.MLP)")
    return list(layers)


def rademacher_probes(count: int, dim: int, generator: torch.Generator | None = None,
                      like: torch.Tensor | None = None) -> torch.Tensor:
    """`count` random sign vectors in R^dim, shape (count, dim); E[u u^T] = I."""
    if count < 1:
        raise ValueError(f"projections must be >= 1, got {count}")
    signs = torch.randint(0, 2, (count, dim), generator=generator)
    u = 2 * signs - 1
    return u.to(like.device, like.dtype) if like is not None else u.float()


def subspace_probes(projections: int, points: int, rank: int, dim: int,
                    generator: torch.Generator | None = None, like: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random probes u = Q^T z / sqrt(rank), one per point and projection: for each projection a
    random `rank`-dimensional subspace Q (rank, dim) shared by the batch and a point's own signs z
    (rank,). E[u u^T] = E[Q^T Q] / rank = I, so each ||J u||^2 is unbiased for ||J||_F^2. Returns
    the factors (Q / sqrt(rank) of shape (projections, rank, dim), z of shape (projections,
    points, rank)) that `forward_with_jvp` takes. Rank 1 is one probe shared by the whole batch;
    a larger rank decorrelates the points' probes for `rank` matrix-vector products with the
    first layer."""
    if rank < 1:
        raise ValueError(f"probe rank must be >= 1, got {rank}")
    q = rademacher_probes(projections * rank, dim, generator, like) / rank ** 0.5
    z = rademacher_probes(projections * points, rank, generator, like)
    return q.reshape(projections, rank, dim), z.reshape(projections, points, rank)


def forward_with_jvp(model: nn.Module, x: torch.Tensor, probes: torch.Tensor, points: int | None = None,
                     mix: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass that returns the output f(x) for the whole batch and J(x_n) u for the first
    `points` points (all if None), differentiable with respect to the parameters.

    Without `mix`, the rows of `probes` (m, d) are probes shared by the batch, and the products
    have shape (m, points, k). With `mix` (m, points, r), `probes` (m, r, d) holds a basis per
    projection and point n's j-th probe is sum_i mix[j, n, i] probes[j, i] (`subspace_probes`)."""
    layers = _relu_layers(model)
    points = len(x) if points is None or points <= 0 else min(points, len(x))
    # Rank 1 (one probe per projection, shared up to a sign per point): the pass is linear in the
    # probe, so J(s u) = s J(u); push u alone and apply the points' signs to the k outputs at the
    # end (exact: a sign flip is exact in floating point).
    signs = None
    if mix is not None and mix.shape[-1] == 1:
        probes, signs, mix = probes[:, 0], mix[:, :points], None
    if mix is None and points == len(x):
        out, v = _stacked_pass(model, layers, x, probes)
    else:
        out, v = _separate_pass(model, layers, x, probes, points, mix)
    if signs is not None:
        v = v * signs
    return out, v


def _stacked_pass(model: nn.Module, layers: list[nn.Linear], x: torch.Tensor, probes: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Probes shared by the whole batch: the first layer takes them as extra rows of the batch
    (one product), then the batch and its m probe passes travel stacked, shape (1 + m, n, width):
    one product per layer, and one mask, x's activation pattern, for the ReLU and the probes
    alike. Returns (f(x), J(x_n) u_j of shape (m, n, k))."""
    n, m = len(x), len(probes)
    first = layers[0]
    both = torch.cat([x, probes]) @ first.weight.T
    z = both[:n] if first.bias is None else both[:n] + first.bias
    s = torch.cat([z[None], both[n:, None, :].expand(m, n, -1)])
    for layer in layers[1:]:
        # ReLU on the batch and x's activation pattern on the probes: s where s[0] > 0, else 0,
        # in one fused kernel (ReLU's own backward kernel, which broadcasts s[0] over the stack;
        # its derivative with respect to s is the same masking, and nothing flows to the pattern)
        s = torch.ops.aten.threshold_backward(s, s[0].detach(), 0)
        s = s @ layer.weight.T
        if layer.bias is not None:  # the biases enter the network's pass only
            s = s + torch.cat([layer.bias[None], layer.bias.new_zeros(m, len(layer.bias))])[:, None]
    return s[0], s[1:]


def _separate_pass(model: nn.Module, layers: list[nn.Linear], x: torch.Tensor, probes: torch.Tensor,
                   points: int, mix: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The probes' pass beside the network's, for the first `points` points; with `mix`, a probe
    basis per projection mixed per point (`subspace_probes`)."""
    z = layers[0](x)
    v = probes @ layers[0].weight.T  # the first layer acts on the probes alone: m r products
    v = v[:, None, :] if mix is None else mix[:, :points] @ v
    for layer in layers[1:]:
        mask = (z[:points] > 0).to(z.dtype)  # x's activation pattern (no gradient through it)
        z = layer(model.act(z))
        v = (v * mask) @ layer.weight.T  # the probes' pass: the same weights, no bias
    return z, v.expand(v.shape[0], points, -1) if v.shape[1] == 1 else v


def frobenius_sq_from_jvp(ju: torch.Tensor) -> torch.Tensor:
    """The per-point estimate of ||J||_F^2 from J u products of shape (m, n, k): the mean over
    the m probes of ||J u||^2. Unbiased when E[u u^T] = I; exact when the probes are the rows
    of the identity scaled by sqrt(m) (m = d)."""
    return ju.pow(2).sum(-1).mean(0)


def frobenius_sq_forward(model: nn.Module, x: torch.Tensor, projections: int = 1,
                         generator: torch.Generator | None = None, rank: int = 1) -> torch.Tensor:
    """An unbiased estimate of ||J(x)||_F^2 for every point, shape (n,), from `projections`
    random-sign probes per point in a random subspace of dimension `rank` (`subspace_probes`;
    rank 1: probes shared by the batch), pushed through `forward_with_jvp`."""
    q, z = subspace_probes(projections, len(x), rank, x[0].numel(), generator, like=x)
    _, ju = forward_with_jvp(model, x.reshape(len(x), -1), q, mix=z)
    return frobenius_sq_from_jvp(ju)


def grokalign_penalty_forward(model: nn.Module, x: torch.Tensor, projections: int = 1,
                              generator: torch.Generator | None = None, rank: int = 1,
                              eps: float = 1e-12) -> torch.Tensor:
    """The GrokAlign regulariser (mean over the batch of ||J(x)||_F) from the forward estimator;
    the cheap counterpart of `grokalign_penalty`, same square root and same `eps`."""
    return (frobenius_sq_forward(model, x, projections, generator, rank) + eps).sqrt().mean()


# ----------------------------------------------------------------------------------------------
# The output-side estimator without a double backward.
#
# Hutchinson on the outputs, ||J^T v||^2 with random signs v in R^k (E[v v^T] = I), is the paper
# code's estimator and our double-backward reference. For a ReLU MLP, J(x)^T v = W_1^T g(x) with
# g(x) = D_1 W_2^T D_2 ... W_L^T v: a linear pass *down* the narrow layers with x's activation
# pattern (one product per narrow layer and point), and ||W_1^T g||^2 = g^T (W_1 W_1^T) g, so the
# wide first layer enters once per update through its Gram matrix, not once per point (when the
# batch has more points than the layer has units; otherwise W_1^T g directly). The result
# equals the reference's for the same v, value and parameter gradients, with one ordinary backward.


def forward_with_vjp_norm(model: nn.Module, x: torch.Tensor, v: torch.Tensor, points: int | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(x) for the whole batch, ||J(x_n)^T v_n||^2 for the first `points` points), with v of
    shape (points, k); both differentiable with respect to the parameters."""
    layers = _relu_layers(model)
    points = len(x) if points is None or points <= 0 else min(points, len(x))
    masks, h = [], x
    for layer in layers[:-1]:
        z = layer(h)
        masks.append((z[:points] > 0).to(z.dtype))
        h = model.act(z)
    out = layers[-1](h)
    g = v @ layers[-1].weight  # (points, width)
    for layer, mask in zip(reversed(layers[1:-1]), reversed(masks[1:])):
        g = (g * mask) @ layer.weight
    g = g * masks[0]
    w1 = layers[0].weight
    if points <= w1.shape[0]:  # fewer points than units: J^T v = W_1^T g directly
        return out, (g @ w1).pow(2).sum(1)
    return out, ((g @ (w1 @ w1.T)) * g).sum(1)


def output_probes(points: int, k: int, generator: torch.Generator | None = None,
                  like: torch.Tensor | None = None) -> torch.Tensor:
    """One random-sign vector in R^k per point, shape (points, k)."""
    return rademacher_probes(points, k, generator, like)
