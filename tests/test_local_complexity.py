"""Local complexity against answers known independently of the implementation."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from replicate.measures.local_complexity import (cross_polytope, lc_phases, local_complexity, mean_ci,
                                        orthonormal_frame, vertex_preactivations)
from replicate.models import MLP


pytestmark = pytest.mark.usefixtures("one_thread")


def mlp(width=32, depth=4, in_dim=784, bias=True, seed=0, activation=None):
    torch.manual_seed(seed)
    model = MLP(in_dim, width, depth, 10, bias=bias).eval()
    if activation is not None:
        model.act = activation
    return model


class Generic(nn.Module):
    """The same network seen through `preactivations` only (forces the generic vertex path)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def preactivations(self, x):
        return self.model.preactivations(x)


@pytest.mark.parametrize("n_directions", [2, 10, 25])
@pytest.mark.parametrize("radius", [1e-4, 1e-2, 1.0, 10.0])
def test_zero_bias_linear_network_cuts_every_neuron_at_the_origin(n_directions, radius):
    # Paper App. A: in a linear MLP with zero biases every layer's hyperplanes pass through the
    # origin, and the method finds all of them, even with P = 2.
    model = mlp(width=40, depth=8, bias=False, activation=nn.Identity())
    lc = local_complexity(model, torch.zeros(3, 784), radius, n_directions, seed=1)
    assert lc.per_layer.tolist() == [[40] * 7 + [10]] * 3


def test_zero_bias_relu_network_cuts_every_first_layer_neuron_at_the_origin():
    model = mlp(width=50, depth=3, bias=False)
    lc = local_complexity(model, torch.zeros(4, 784), 0.01, 5)
    assert (lc.per_layer[:, 0] == 50).all()


def test_first_layer_count_matches_the_hyperplane_distance_formula():
    # A neuron's hyperplane w.z + b = 0 meets the cross-polytope conv{x ± r v_p} exactly when
    # |w.x + b| < r max_p |w.v_p| (an affine function on a polytope is extreme at its vertices).
    model = mlp(width=200, depth=2, seed=3).double()
    frame = orthonormal_frame(784, 25, seed=4, dtype=torch.float64)
    points = torch.rand(60, 784, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    w, b = model.layers[0].weight.detach(), model.layers[0].bias.detach()
    for radius in [0.05, 0.5, 2.0]:
        reach = radius * (frame @ w.T).abs().max(dim=0).values  # (200,)
        expected = ((points @ w.T + b).abs() < reach).sum(dim=1)
        lc = local_complexity(model, points, radius, frame=frame)
        assert torch.equal(lc.per_layer[:, 0], expected)
        assert expected.float().mean() > 1  # the check is not vacuous


def test_lc_falls_as_the_neighbourhood_moves_away_from_the_origin():
    # Paper App. A (Fig. 15): shifting the neighbourhood from 0 towards [10]^d lowers LC of a
    # random MLP with biases, whose knots crowd around the origin.
    model = mlp(width=100, depth=6, seed=7)
    shifts = np.linspace(0, 10, 11)
    points = torch.tensor(shifts, dtype=torch.float32)[:, None] * torch.ones(1, 784)
    lc = local_complexity(model, points, radius=1.0, n_directions=20, seed=2).hidden.float().numpy()
    assert lc[0] > 3 * lc[-1]
    assert lc[:4].mean() > lc[4:8].mean() > lc[8:].mean()


def test_network_that_is_linear_on_the_neighbourhood_has_zero_lc():
    # Large positive biases keep every ReLU on: the network is affine around these points, so it
    # has no knot there. Without the biases the same weights do cut the neighbourhood.
    model = mlp(width=64, depth=4, seed=8)
    points = torch.rand(20, 784, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        for layer in model.layers[:-1]:
            layer.bias.fill_(100.0)
    assert local_complexity(model, points, 0.1).hidden.sum() == 0
    with torch.no_grad():
        for layer in model.layers[:-1]:
            layer.bias.zero_()
    assert local_complexity(model, torch.zeros(20, 784), 0.1).hidden.sum() > 0


def test_mlp_shortcut_equals_pushing_every_vertex_through_the_network():
    model = mlp(width=64, depth=4, seed=10)
    points = torch.rand(30, 784, generator=torch.Generator().manual_seed(11))
    for radius in [0.005, 0.05, 0.5]:
        fast = local_complexity(model, points, radius, 25, seed=3, batch_size=7)
        dense = local_complexity(Generic(model), points, radius, 25, seed=3)
        assert torch.equal(fast.per_layer, dense.per_layer)
    per_point = orthonormal_frame(784, 6, seed=12, n_points=30)
    fast = local_complexity(model, points, 0.5, frame=per_point, batch_size=8)
    dense = local_complexity(Generic(model), points, 0.5, frame=per_point)
    assert torch.equal(fast.per_layer, dense.per_layer)
    assert fast.hidden.sum() > 0


def test_vertex_preactivations_are_the_network_at_the_vertices():
    model = mlp(width=16, depth=3, seed=13).double()
    points = torch.rand(4, 784, dtype=torch.float64)
    offsets = cross_polytope(orthonormal_frame(784, 3, dtype=torch.float64), 0.3)
    layers = vertex_preactivations(model, points, offsets)
    vertices = torch.stack([points[n] + offsets[v] for n in range(4) for v in range(6)])
    for got, want in zip(layers, model.preactivations(vertices)):
        assert torch.allclose(got.reshape(24, -1), want, rtol=1e-10, atol=1e-12)


def test_frames_are_orthonormal():
    shared = orthonormal_frame(50, 7, seed=0, dtype=torch.float64)
    assert torch.allclose(shared @ shared.T, torch.eye(7, dtype=torch.float64), atol=1e-12)
    batch = orthonormal_frame(50, 7, seed=0, n_points=3, dtype=torch.float64)
    assert torch.allclose(batch @ batch.transpose(1, 2), torch.eye(7, dtype=torch.float64), atol=1e-12)
    assert not torch.allclose(batch[0], batch[1])
    with pytest.raises(ValueError):
        orthonormal_frame(5, 6)


def test_mean_ci_is_the_normal_interval():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0] * 20)
    mean, half = mean_ci(values)
    assert mean == 3.0
    assert half == pytest.approx(2.5758293 * values.std(ddof=1) / 10, rel=1e-6)
    assert math.isnan(mean_ci([1.0])[1])


def test_lc_phases_on_a_known_curve():
    curve = np.array([5.0, 3.0, 2.0, 4.0, 6.0, 5.0, 3.0, 1.5])
    phases = lc_phases(curve, interpolation_index=3)
    assert (phases.first_min, phases.peak) == (2, 4)
    assert phases.first_descent == pytest.approx(0.4)
    assert phases.ascent == pytest.approx(3.0)
    assert phases.second_descent == pytest.approx(0.75)
    # A curve that only falls has no ascent: the "peak" is its first minimum.
    falling = lc_phases(np.array([4.0, 3.0, 2.0, 1.0]), interpolation_index=1)
    assert falling.peak == falling.first_min == 1 and falling.ascent == 1.0
