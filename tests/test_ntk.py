"""The empirical NTK against closed forms and dense per-sample gradients."""
import pytest
import torch
from torch import nn

from replicate.measures import ntk
from replicate.models import MLP


def _points(n=5, d=4, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_parameter_gradients_match_a_loop_over_points():
    torch.manual_seed(0)
    model = MLP(4, 6, 3, 2).double()
    x = _points()
    g = ntk.parameter_gradients(model, x)
    for n in range(len(x)):
        for k in range(2):
            rows = torch.autograd.grad(model(x[n:n + 1])[0, k], list(model.parameters()))
            assert torch.allclose(g[n, k], torch.cat([r.flatten() for r in rows]), atol=1e-12)


@pytest.mark.parametrize("bias, outputs, activation", [(False, 1, "relu"), (True, 3, "relu"),
                                                       (True, 2, "gelu")])
def test_the_mlp_kernel_layer_by_layer_equals_the_contracted_per_point_gradients(bias, outputs,
                                                                                 activation):
    torch.manual_seed(0)
    model = MLP(6, 9, 3, outputs, bias=bias, activation=activation).double()
    x = _points(11, 6)
    g = ntk.parameter_gradients(model, x)  # (n, k, P), checked against a loop over points above
    dense = torch.einsum("nkp,mkp->nm", g, g)
    layered = ntk.mlp_ntk(model, x)
    assert torch.allclose(layered, dense, rtol=1e-12, atol=1e-12)
    assert torch.equal(ntk.empirical_ntk(model, x), layered)  # the MLP takes this path
    assert all(p.grad is None for p in model.parameters())  # and leaves no gradients behind


def test_ntk_of_a_linear_map_is_the_gram_matrix():
    # f(x) = W x with k outputs: df_i/dW = e_i x^T, so K(x, x') = k <x, x'>.
    lin = nn.Linear(4, 3, bias=False).double()
    x = _points()
    assert torch.allclose(ntk.empirical_ntk(lin, x), 3 * x @ x.T, atol=1e-12)


def test_ntk_of_a_linear_model_is_constant_during_training():
    lin = nn.Linear(4, 1, bias=False).double()
    x, y = _points(8), _points(8, 1, seed=1)
    k0 = ntk.empirical_ntk(lin, x)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(20):
        opt.zero_grad()
        ((lin(x) - y) ** 2).mean().backward()
        opt.step()
    assert ntk.relative_change(ntk.empirical_ntk(lin, x), k0) < 1e-12
    # a ReLU network trained the same way does move its kernel (the measure can detect a change)
    torch.manual_seed(0)
    net = MLP(4, 16, 2, 1).double()
    k0 = ntk.empirical_ntk(net, x)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(50):
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()
    assert ntk.relative_change(ntk.empirical_ntk(net, x), k0) > 1e-3


def test_ntk_is_symmetric_positive_semidefinite():
    torch.manual_seed(1)
    model = MLP(4, 8, 3, 2).double()
    k = ntk.empirical_ntk(model, _points(7))
    assert torch.allclose(k, k.T, atol=1e-12)
    assert torch.linalg.eigvalsh(k).min() > -1e-10


def test_kernel_alignment_and_relative_change():
    a = torch.tensor([[2.0, 1.0], [1.0, 2.0]])
    assert abs(ntk.kernel_alignment(a, 3 * a) - 1) < 1e-6
    assert ntk.kernel_alignment(a, torch.eye(2)) < 0.95
    assert abs(ntk.relative_change(2 * a, a) - 1) < 1e-6
