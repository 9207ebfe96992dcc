"""Input Jacobians, centroids and the Frobenius-norm estimator against dense autograd answers."""
import pytest
import torch
from torch import nn

from replicate.measures import jacobian as jac
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


# The forward (masked linear pass) estimator against independent references.


def _torch_func():
    import warnings

    with warnings.catch_warnings():  # importing torch.func warns about torch.jit.script
        warnings.simplefilter("ignore", FutureWarning)
        import torch.func
    return torch.func


def _reference_penalty_sq(model, x):
    """The exact ||J||_F^2 per point by the reference route: output basis vectors, vector-Jacobian
    products with create_graph (a double backward), differentiable in the parameters."""
    k = model(x[:1]).shape[1]
    total = 0.0
    for i in range(k):
        v = torch.zeros(len(x), k, dtype=x.dtype)
        v[:, i] = 1
        _, jtv = jac._vjp(model, x, v, create_graph=True)
        total = total + jtv.pow(2).sum(1)
    return total


def _grads(model, value):
    return torch.autograd.grad(value, list(model.parameters()), allow_unused=True)


def _same_grads(a, b, atol=1e-10):
    for ga, gb in zip(a, b):
        if ga is None or gb is None:
            assert (ga is None or torch.all(ga == 0)) and (gb is None or torch.all(gb == 0))
        else:
            assert torch.allclose(ga, gb, atol=atol)


def test_forward_pass_gives_the_network_output_and_jacobian_vector_products():
    for bias in (True, False):
        model, x = _tiny(out_dim=3, bias=bias), _points(5)
        u = torch.randn(4, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        out, ju = jac.forward_with_jvp(model, x, u)
        assert torch.allclose(out, model(x), atol=1e-12)
        dense = _dense_jacobians(model, x)  # (n, k, d)
        assert torch.allclose(ju, torch.einsum("nkd,md->mnk", dense, u), atol=1e-12)
        # only the first `points` points get the products
        assert jac.forward_with_jvp(model, x, u, points=2)[1].shape == (4, 2, 3)


def test_forward_estimator_with_a_full_basis_is_exact_in_value_and_gradient():
    # probes = sqrt(d) e_j (E[u u^T] = I over a uniform j): the estimate is exactly ||J||_F^2, and
    # both its value and its parameter gradients equal the double-backward reference.
    for bias in (True, False):
        model, x = _tiny(out_dim=3, bias=bias), _points(5)
        probes = 6 ** 0.5 * torch.eye(6, dtype=torch.float64)
        ours = jac.frobenius_sq_from_jvp(jac.forward_with_jvp(model, x, probes)[1])
        ref = _reference_penalty_sq(model, x)
        assert torch.allclose(ours, ref, atol=1e-10)
        assert torch.allclose(ours, jac.frobenius_norm_exact(model, x) ** 2, atol=1e-10)
        _same_grads(_grads(model, ours.sqrt().mean()), _grads(model, ref.sqrt().mean()))


@pytest.mark.filterwarnings("ignore:.*torch.jit.script:FutureWarning")
def test_forward_estimator_matches_torch_func_jvp_for_a_fixed_probe():
    # ||J u||^2 for one fixed probe, value and parameter gradients, against forward-mode AD
    functional_call, jvp = _torch_func().functional_call, _torch_func().jvp
    for bias in (True, False):
        model, x = _tiny(out_dim=3, bias=bias), _points(5)
        u = torch.randn(1, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        ours = jac.forward_with_jvp(model, x, u)[1][0].pow(2).sum()
        params = dict(model.named_parameters())

        def ref_value(p):
            f = lambda inp: functional_call(model, p, (inp,))  # noqa: E731
            return jvp(f, (x,), (u.expand_as(x),))[1].pow(2).sum()
        ref = ref_value(params)
        assert torch.allclose(ours, ref, atol=1e-10)
        _same_grads(_grads(model, ours), _grads(model, ref))


@pytest.mark.filterwarnings("ignore:.*torch.jit.script:FutureWarning")
def test_forward_estimator_is_unbiased_in_value_and_gradient():
    jacrev = _torch_func().jacrev
    model, x = _tiny(out_dim=4, bias=True), _points(3)
    exact = torch.stack([jacrev(model)(xi).pow(2).sum() for xi in x])  # independent exact answer
    gen = torch.Generator().manual_seed(0)
    many = jac.frobenius_sq_forward(model, x, projections=20000, generator=gen)
    assert torch.allclose(many, exact, rtol=0.03)
    one = jac.frobenius_sq_forward(model, x, projections=1, generator=gen)
    assert not torch.allclose(one, exact, rtol=1e-3)  # a single probe is a noisy draw
    # probes of each point drawn in a random subspace (rank 3 of 6) are unbiased as well
    sub = jac.frobenius_sq_forward(model, x, projections=20000, generator=gen, rank=3)
    assert torch.allclose(sub, exact, rtol=0.03)
    # the gradient of the mean over many probes approaches the exact gradient
    exact_grad = _grads(model, _reference_penalty_sq(model, x).sum())
    est_grad = _grads(model, jac.frobenius_sq_forward(model, x, projections=20000, generator=gen).sum())
    for ge, gx in zip(est_grad, exact_grad):
        if gx is not None and ge is not None:
            assert (ge - gx).norm() <= 0.05 * gx.norm() + 1e-9


def test_forward_estimator_refuses_a_non_relu_network():
    model = MLP(6, 5, 3, 2, activation="gelu").double()
    with pytest.raises(TypeError):
        jac.frobenius_sq_forward(model, _points(2))


# The output-side estimator without a double backward: the reference's estimate, exactly.


def test_output_estimator_equals_the_double_backward_reference_value_and_gradient():
    for bias in (True, False):
        for n in (3, 9):  # fewer points than hidden units (direct product) and more (Gram matrix)
            model, x = _tiny(out_dim=3, bias=bias), _points(n)
            v = 2 * torch.randint(0, 2, (n, 3), generator=torch.Generator().manual_seed(n)).double() - 1
            out, ours = jac.forward_with_vjp_norm(model, x, v)
            assert torch.allclose(out, model(x), atol=1e-12)
            _, jtv = jac._vjp(model, x, v, create_graph=True)  # the reference: double backward
            ref = jtv.pow(2).sum(1)
            assert torch.allclose(ours, ref, atol=1e-10)
            _same_grads(_grads(model, ours.sqrt().mean()), _grads(model, ref.sqrt().mean()))


def test_output_estimator_matches_the_reference_penalty_draw_for_draw():
    # same generator state -> the same random signs -> the same penalty as grokalign_penalty
    model, x = _tiny(out_dim=4, bias=False), _points(7)
    ref = jac.grokalign_penalty(model, x, 1, torch.Generator().manual_seed(3))
    v = jac.output_probes(7, 4, torch.Generator().manual_seed(3), like=x)
    ours = (jac.forward_with_vjp_norm(model, x, v)[1] + 1e-12).sqrt().mean()
    assert torch.allclose(ours, ref, atol=1e-12)
    _same_grads(_grads(model, ours), _grads(model, ref))


def test_output_estimator_is_unbiased_and_exact_for_a_scalar_output():
    model, x = _tiny(out_dim=4, bias=True), _points(3)
    exact = jac.frobenius_norm_exact(model, x) ** 2
    gen = torch.Generator().manual_seed(0)
    draws = [jac.forward_with_vjp_norm(model, x, jac.output_probes(3, 4, gen, like=x))[1]
             for _ in range(4000)]
    assert torch.allclose(torch.stack(draws).mean(0), exact, rtol=0.03)
    assert not torch.allclose(draws[0], exact, rtol=1e-3)
    scalar = _tiny(out_dim=1, bias=False)
    v = jac.output_probes(3, 1, gen, like=x)
    assert torch.allclose(jac.forward_with_vjp_norm(scalar, x, v)[1],
                          jac.frobenius_norm_exact(scalar, x) ** 2, atol=1e-10)


def test_stacked_and_separate_passes_agree_with_per_point_signs():
    # Probes shared by the batch travel stacked with it (`_stacked_pass`); a rank-1 subspace is the
    # shared probe times a sign per point. Both must give the dense J(x_n) u_n, value and gradient,
    # and the same as the separate pass (used when only some points carry the penalty).
    for bias in (True, False):
        model, x = _tiny(out_dim=3, bias=bias), _points(5)
        q, z = jac.subspace_probes(2, 5, 1, 6, torch.Generator().manual_seed(3), like=x)
        out, ju = jac.forward_with_jvp(model, x, q, mix=z)
        assert torch.allclose(out, model(x), atol=1e-12)
        per_point = z * q[:, 0][:, None, :]  # (m, n, d): point n's probe in projection j
        dense = _dense_jacobians(model, x)
        assert torch.allclose(ju, torch.einsum("nkd,mnd->mnk", dense, per_point), atol=1e-12)
        layers = jac._relu_layers(model)
        out_s, ju_s = jac._separate_pass(model, layers, x, q[:, 0], 5, None)
        signed = ju_s * z
        assert torch.allclose(out_s, out, atol=1e-12) and torch.allclose(signed, ju, atol=1e-12)
        _same_grads(_grads(model, ju.pow(2).sum() + out.sum()),
                    _grads(model, signed.pow(2).sum() + out_s.sum()))
