"""Local complexity (LC): how many neurons "cut" a small neighbourhood of a point.

The progress measure of Humayun et al., *Deep Networks Always Grok* (§2.2). Around a point x we
take a P-dimensional cross-polytope (an l1 ball of radius r in a random P-dimensional subspace):
its 2P vertices are x ± r·v_p for P orthonormal directions v_p. We push the vertices through the
network and, layer by layer, count the neurons whose pre-activation does not have the same sign
at every vertex: such a neuron's zero set (a "knot" of the spline the network computes) passes
through the embedded neighbourhood conv(f_{1:l-1}(vertices)). The count is a proxy for the
density of linear regions near x.

Works for any model with a `preactivations(x)` method returning one tensor per layer, the last
being the output (as `replicate.models.MLP` does). For `MLP` the first layer is evaluated once per
point instead of once per vertex, because it is affine: W(x + o) + b = (Wx + b) + Wo.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import torch
from torch import nn

from ..models import MLP
from ..runtime import costed


def orthonormal_frame(dim: int, n_directions: int, seed: int = 0, n_points: int | None = None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`n_directions` orthonormal vectors of R^dim, uniformly oriented, as rows.

    Shape (P, dim) for one frame shared by every point (as the paper's code does), or
    (n_points, P, dim) for an independent frame per point.
    """
    if not 1 <= n_directions <= dim:
        raise ValueError(f"need 1 <= n_directions <= dim, got n_directions={n_directions}, dim={dim}")
    gen = torch.Generator().manual_seed(seed)
    shape = (dim, n_directions) if n_points is None else (n_points, dim, n_directions)
    gaussian = torch.randn(shape, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    # Fix the signs so the frame is uniformly (Haar) distributed, not biased by QR's convention.
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
    return q.transpose(-1, -2).to(dtype)


def cross_polytope(frame: torch.Tensor, radius: float) -> torch.Tensor:
    """Vertex offsets ±r·v_p of the cross-polytope spanned by `frame`: (..., 2P, dim)."""
    return torch.cat([radius * frame, -radius * frame], dim=-2)


def vertex_preactivations(model: nn.Module, points: torch.Tensor,
                          offsets: torch.Tensor) -> list[torch.Tensor]:
    """Pre-activations at the vertices points[n] + offsets[(n,) v], one (N, V, width) tensor per layer.

    `offsets` is (V, dim), shared by all points, or (N, V, dim).
    """
    if isinstance(model, MLP):
        first = model.layers[0]
        # Affine first layer: one matrix product per point and one per offset, not per vertex.
        z = first(points).unsqueeze(1) + offsets @ first.weight.T
        out = [z]
        for layer in model.layers[1:]:
            z = layer(model.act(z))
            out.append(z)
        return out
    n, v = points.shape[0], offsets.shape[-2]
    vertices = (points.unsqueeze(1) + offsets).reshape(n * v, *points.shape[1:])
    return [z.reshape(n, v, -1) for z in model.preactivations(vertices)]


def sign_changes(preactivations: torch.Tensor) -> torch.Tensor:
    """Per point, the number of neurons whose sign is not constant over the vertices (dim 1)."""
    positive = preactivations > 0
    return (positive.any(dim=1) & ~positive.all(dim=1)).sum(dim=-1)


@dataclass
class LocalComplexity:
    """LC per point and layer. `per_layer[:, -1]` is the output layer, the rest hidden layers."""
    per_layer: torch.Tensor  # (N, L) integer counts

    @property
    def hidden(self) -> torch.Tensor:
        """LC summed over the hidden layers, per point (our headline LC)."""
        return self.per_layer[:, :-1].sum(dim=1)

    @property
    def output(self) -> torch.Tensor:
        """Knots of the output units (the 10 logits) in the neighbourhood, per point."""
        return self.per_layer[:, -1]


@costed("local complexity")
def local_complexity(model: nn.Module, points: torch.Tensor, radius: float, n_directions: int = 25,
                     seed: int = 0, frame: torch.Tensor | None = None,
                     batch_size: int = 250) -> LocalComplexity:
    """LC of `model` around each of `points` (N, dim) in cross-polytopes of radius `radius`.

    The frame of directions is `frame` if given ((P, dim) shared, or (N, P, dim) per point),
    otherwise one seeded frame of `n_directions` directions shared by all points.
    Points are processed `batch_size` at a time (memory grows as batch_size * 2P * width).
    """
    if radius <= 0:
        raise ValueError(f"radius must be positive, got {radius}")
    points = points.reshape(points.shape[0], -1)
    param = next(model.parameters())
    points = points.to(param.device, param.dtype)
    if frame is None:
        frame = orthonormal_frame(points.shape[1], n_directions, seed, dtype=param.dtype)
    offsets = cross_polytope(frame.to(param.device, param.dtype), radius)
    per_point_frame = offsets.dim() == 3
    counts = []
    with torch.no_grad():
        for start in range(0, points.shape[0], batch_size):
            chunk = slice(start, start + batch_size)
            layers = vertex_preactivations(model, points[chunk],
                                           offsets[chunk] if per_point_frame else offsets)
            counts.append(torch.stack([sign_changes(z) for z in layers], dim=1))
    return LocalComplexity(torch.cat(counts).cpu())


def mean_ci(values, level: float = 0.99) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation confidence interval at `level`."""
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return float(values.mean()), math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return float(values.mean()), float(z * values.std(ddof=1) / math.sqrt(values.size))


@dataclass
class LCPhases:
    """The three phases of an LC curve (indices into the checkpoint list)."""
    first_min: int  # end of the first descent: lowest LC up to interpolation
    peak: int  # end of the ascent = start of the second descent: highest LC after first_min
    first_descent: float  # LC(first_min) / LC(0)
    ascent: float  # LC(peak) / LC(first_min)
    second_descent: float  # 1 - LC(final) / LC(peak): the fraction lost since the peak


def lc_phases(lc: np.ndarray, interpolation_index: int) -> LCPhases:
    """Locate descent -> ascent -> second descent in an LC curve sampled at checkpoints.

    The first descent ends at the lowest LC among checkpoints 0..`interpolation_index` (the paper:
    the ascent lasts "until training interpolation is reached"); the ascent ends at the highest LC
    after that minimum, where the second descent begins.
    """
    lc = np.asarray(lc, dtype=float)
    last = int(np.clip(interpolation_index, 0, len(lc) - 1))
    first_min = int(np.argmin(lc[:last + 1]))
    peak = first_min + int(np.argmax(lc[first_min:]))
    ratio = lambda a, b: float(a / b) if b > 0 else math.nan  # noqa: E731
    return LCPhases(first_min=first_min, peak=peak, first_descent=ratio(lc[first_min], lc[0]),
                    ascent=ratio(lc[peak], lc[first_min]),
                    second_descent=1.0 - ratio(lc[-1], lc[peak]) if lc[peak] > 0 else math.nan)
