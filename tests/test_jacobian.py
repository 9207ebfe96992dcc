"""Input Jacobians, centroids and the Frobenius-norm estimator against dense autograd answers."""
import torch
from torch import nn

from replicate import jacobian as jac
from replicate.models import MLP


def _tiny(out_dim=3, bias=True, seed=0):
    torch.manual_seed(seed)
    return MLP(6, 5, 3, out_dim, bias=bias).double()


def _points(n=4, d=6, seed=1):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _dense_jacobians(model, x):
    """One full Jacobian per point from torch.autograd.functional (independent of our VJPs)."""
    return torch.stack([torch.autograd.functional.jacobian(lambda p: model(p.unsqueeze(0))[0], xi)
                        for xi in x])


def test_input_jacobian_matches_dense_autograd():
    model, x = _tiny(), _points()
    assert torch.allclose(jac.input_jacobian(model, x), _dense_jacobians(model, x), atol=1e-12)


def test_centroid_is_the_sum_of_the_jacobian_rows():
    model, x = _tiny(), _points()
    expected = _dense_jacobians(model, x).sum(1)
    assert torch.allclose(jac.centroids(model, x), expected, atol=1e-12)


def test_centroid_of_a_linear_map_is_w_transpose_ones():
    lin = nn.Linear(6, 3, bias=False).double()
    x = _points()
    expected = lin.weight.detach().T @ torch.ones(3, dtype=torch.float64)
    assert torch.allclose(jac.centroids(lin, x), expected.expand(len(x), -1), atol=1e-12)


def test_euler_identity_for_bias_free_relu_nets():
    # A bias-free ReLU network is positively 1-homogeneous, so <c(x), x> = f(x) exactly...
    stats = jac.centroid_statistics(_tiny(out_dim=1, bias=False), _points(8))
    assert torch.allclose(stats["inner"], stats["output"], atol=1e-12)
    # ...and a network with biases is not (the check can fail).
    stats = jac.centroid_statistics(_tiny(out_dim=1, bias=True), _points(8))
    assert not torch.allclose(stats["inner"], stats["output"], atol=1e-3)


def test_cosine_and_norm_of_the_centroid():
    lin = nn.Linear(6, 1, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[3.0, 4.0, 0, 0, 0, 0]]))
    x = torch.tensor([[1.0, 0, 0, 0, 0, 0], [0, 0, 2.0, 0, 0, 0]], dtype=torch.float64)
    stats = jac.centroid_statistics(lin, x)
    assert torch.allclose(stats["norm"], torch.tensor([5.0, 5.0], dtype=torch.float64))
    assert torch.allclose(stats["cosine"], torch.tensor([0.6, 0.0], dtype=torch.float64))


def test_exact_frobenius_norm():
    model, x = _tiny(), _points()
    expected = _dense_jacobians(model, x).flatten(1).norm(dim=1)
    assert torch.allclose(jac.frobenius_norm_exact(model, x), expected, atol=1e-12)


def test_frobenius_estimator_is_unbiased():
    model, x = _tiny(out_dim=5), _points(3)
    exact = jac.frobenius_norm_exact(model, x) ** 2
    gen = torch.Generator().manual_seed(0)
    mean = jac.frobenius_sq_estimate(model, x, projections=3000, generator=gen)
    assert torch.allclose(mean, exact, rtol=0.02)
    # a single projection is a noisy draw, not the exact value (so the test above means something)
    one = jac.frobenius_sq_estimate(model, x, projections=1, generator=gen)
    assert not torch.allclose(one, exact, rtol=1e-3)


def test_penalty_is_exact_for_a_scalar_output():
    model, x = _tiny(out_dim=1), _points(5)
    expected = jac.frobenius_norm_exact(model, x).mean()
    assert torch.allclose(jac.grokalign_penalty(model, x, eps=0.0), expected, atol=1e-10)
