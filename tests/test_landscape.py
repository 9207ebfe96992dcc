"""The landscape measures against answers known independently: dense Hessians and eigvalsh,
closed-form quadratics, planted trajectories and planted spikes."""
import math
import numpy as np
import pytest
import torch
from torch import nn

from replicate.measures import landscape as ls
from replicate.experiments.algorithmic import modular_arithmetic
from replicate.experiments.slingshot import TrajectoryRecorder, slingshot_run


def tiny_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)).double()


def tiny_data(seed=1, n=20):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=gen, dtype=torch.float64), torch.randint(0, 4, (n,), generator=gen)


def test_flat_params_round_trip_and_loss_at_matches_the_model():
    net, (x, y) = tiny_net(), tiny_data()
    vec = ls.flat_params(net)
    assert vec.numel() == sum(p.numel() for p in net.parameters()) == 44
    assert torch.allclose(ls.loss_at(net, vec, x, y), nn.functional.cross_entropy(net(x), y))
    with pytest.raises(ValueError):
        ls.loss_at(net, vec[:-1], x, y)


def test_hvp_equals_dense_hessian_times_vector():
    net, (x, y) = tiny_net(), tiny_data()
    dense = ls.dense_hessian(net, x, y)
    hvp = ls.hvp_operator(net, x, y)
    for seed in range(3):
        v = torch.randn(dense.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        assert torch.allclose(hvp(v), dense @ v, atol=1e-10)
    # The cross-entropy Hessian of a tanh network is indefinite: a non-trivial test of λ_min.
    assert torch.linalg.eigvalsh(dense)[0] < 0


def test_hvp_at_other_weights_uses_those_weights():
    net, (x, y) = tiny_net(), tiny_data()
    other = ls.flat_params(tiny_net(seed=5))
    v = torch.ones(other.numel(), dtype=torch.float64)
    expected = ls.dense_hessian(net, x, y, at=other) @ v
    assert torch.allclose(ls.hvp_operator(net, x, y, at=other)(v), expected, atol=1e-10)
    assert not torch.allclose(ls.hvp_operator(net, x, y)(v), expected, atol=1e-6)


def test_lanczos_extremes_of_a_quadratic_match_eigvalsh():
    # f(w) = ½ wᵀAw has Hessian A; a spectrum with both signs and a dominant eigenvalue.
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(60, 60, generator=gen, dtype=torch.float64))
    eig = torch.cat([torch.tensor([50.0, -3.0]), torch.linspace(-0.5, 2.0, 58)]).double()
    a = q @ torch.diag(eig) @ q.T
    res = ls.lanczos_extremes(lambda v: a @ v, 60, iterations=60, dtype=torch.float64)
    assert res.lambda_max == pytest.approx(50.0, rel=1e-2)
    assert res.lambda_min == pytest.approx(-3.0, rel=1e-2)
    # Fewer iterations than the dimension: the well-separated extremes are still found.
    res = ls.lanczos_extremes(lambda v: a @ v, 60, iterations=30, dtype=torch.float64)
    assert res.lambda_max == pytest.approx(50.0, rel=1e-2) and res.lambda_min == pytest.approx(-3.0, rel=1e-2)


def test_lanczos_extremes_of_a_network_hessian_match_eigvalsh():
    net, (x, y) = tiny_net(), tiny_data()
    true = torch.linalg.eigvalsh(ls.dense_hessian(net, x, y))
    res = ls.hessian_extremes(net, x, y, iterations=44)
    assert res.lambda_max == pytest.approx(float(true[-1]), rel=1e-2)
    assert res.lambda_min == pytest.approx(float(true[0]), rel=1e-2)


def test_lanczos_stops_early_on_a_small_invariant_subspace():
    # A rank-one operator: the first Krylov step already spans an invariant subspace.
    u = torch.zeros(10, dtype=torch.float64)
    u[3] = 1.0
    res = ls.lanczos_extremes(lambda v: 7.0 * u * (u @ v), 10, iterations=10, dtype=torch.float64)
    assert res.lambda_max == pytest.approx(7.0) and res.iterations <= 3


def quadratic_with_spectrum(eigenvalues: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A dense symmetric matrix with these eigenvalues, in a random orthonormal basis."""
    gen = torch.Generator().manual_seed(seed)
    dim = len(eigenvalues)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    return q @ torch.diag(eigenvalues.double()) @ q.T


def two_pass_lanczos_ritz_values(a: torch.Tensor, iterations: int, seed: int = 0) -> np.ndarray:
    """Ritz values of plain Lanczos with two full Gram-Schmidt passes every step (what
    `lanczos_extremes` did before its one-pass reorthogonalisation): the reference."""
    dim = a.shape[0]
    q = torch.randn(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    basis, alpha, beta = [q / q.norm()], [], []
    for j in range(iterations):
        w = a @ basis[-1]
        alpha.append(float(w @ basis[-1]))
        stacked = torch.stack(basis)
        for _ in range(2):
            w -= stacked.T @ (stacked @ w)
        if j < iterations - 1:
            beta.append(float(w.norm()))
            basis.append(w / beta[-1])
    return np.linalg.eigvalsh(ls.tridiagonal(np.array(alpha), np.array(beta)))


def test_one_reorthogonalisation_pass_gives_the_ritz_values_of_two():
    eig = torch.cat([torch.tensor([40.0, -8.0]), torch.linspace(-1.0, 3.0, 298)])
    a = quadratic_with_spectrum(eig, seed=2)
    res = ls.lanczos_extremes(lambda v: a @ v, 300, iterations=60, dtype=torch.float64)
    assert np.allclose(res.ritz_values, two_pass_lanczos_ritz_values(a, 60), rtol=0, atol=1e-10)


def test_lanczos_with_a_tolerance_stops_early_on_an_easy_spectrum_and_matches_eigvalsh():
    # Two extremes far from a bulk: both converge in a few dozen products out of 400.
    eig = torch.cat([torch.tensor([30.0, -12.0]), torch.linspace(-1.0, 1.0, 398)])
    a = quadratic_with_spectrum(eig)
    tolerance = 1e-8
    res = ls.lanczos_extremes(lambda v: a @ v, 400, iterations=400, dtype=torch.float64,
                              tolerance=tolerance)
    assert res.iterations < 60
    true = torch.linalg.eigvalsh(a)
    assert res.lambda_max == pytest.approx(float(true[-1]), rel=1e-8)
    assert res.lambda_min == pytest.approx(float(true[0]), rel=1e-8)
    # The residuals measured with an extra product each confirm the stop read off T.
    assert max(res.residual_max, res.residual_min) < tolerance * res.norm_estimate
    # Without a tolerance the same call runs all its iterations.
    assert ls.lanczos_extremes(lambda v: a @ v, 400, iterations=80,
                               dtype=torch.float64).iterations == 80


def test_lanczos_tolerance_stop_on_a_network_hessian_matches_eigvalsh():
    net, (x, y) = tiny_net(), tiny_data()
    true = torch.linalg.eigvalsh(ls.dense_hessian(net, x, y))
    tolerance = 1e-6
    res = ls.hessian_extremes(net, x, y, iterations=44, tolerance=tolerance)
    assert res.relative_residual < tolerance
    assert res.lambda_max == pytest.approx(float(true[-1]), rel=1e-5)
    assert res.lambda_min == pytest.approx(float(true[0]), rel=1e-5)


def test_a_tolerance_on_the_largest_pair_alone_stops_before_the_smallest_has_converged():
    # lambda_max far from the bulk converges fast; lambda_min at the edge of a dense bulk does not.
    eig = torch.cat([torch.tensor([30.0]), torch.linspace(-1.0, 1.0, 399)])
    a = quadratic_with_spectrum(eig, seed=3)
    largest = ls.lanczos_extremes(lambda v: a @ v, 400, iterations=400, dtype=torch.float64,
                                  tolerance=1e-8, which="largest")
    both = ls.lanczos_extremes(lambda v: a @ v, 400, iterations=400, dtype=torch.float64,
                               tolerance=1e-8)
    assert largest.iterations < both.iterations
    assert largest.residual_max < 1e-8 * largest.norm_estimate < largest.residual_min
    assert largest.lambda_max == pytest.approx(30.0, rel=1e-8)
    with pytest.raises(ValueError, match="which"):
        ls.lanczos_extremes(lambda v: a @ v, 400, tolerance=1e-8, which="smallest")


def test_a_tolerance_out_of_reach_stops_at_the_iteration_cap():
    # Evenly spaced eigenvalues: the extremes need many products; 10 are not enough for 1e-12.
    a = quadratic_with_spectrum(torch.linspace(-1.0, 1.0, 200))
    res = ls.lanczos_extremes(lambda v: a @ v, 200, iterations=10, dtype=torch.float64,
                              tolerance=1e-12)
    assert res.iterations == 10 and res.relative_residual > 1e-12


def test_gradient_norm_of_a_linear_model_matches_the_closed_form():
    # Mean squared error of w·x: gradient = (2/n) Xᵀ(Xw − y).
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, generator=gen, dtype=torch.float64), torch.randn(8, generator=gen, dtype=torch.float64)
    model = nn.Linear(3, 1, bias=False).double()
    w = model.weight.detach().reshape(-1)
    expected = (2 / 8) * x.T @ (x @ w - y)
    got = ls.gradient_norm(model, x, y, loss_fn=lambda out, t: ((out.squeeze(1) - t) ** 2).mean())
    assert got == pytest.approx(float(expected.norm()), rel=1e-10)


def test_cosine_is_computed_in_float64():
    u = torch.ones(100_000)
    v = u.clone()
    v[0] += 1e-3  # 1 − cos ≈ 5e-12, below float32 resolution
    one_minus = 1 - ls.cosine(u, v)
    assert 1e-12 < one_minus < 1e-11
    assert ls.cosine(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])) == pytest.approx(0.0)


def test_pca_recovers_a_planted_plane_and_ratios_sum_to_one():
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.normal(size=(500, 2)))
    t = np.linspace(0, 1, 80)
    coords = np.stack([3 * np.cos(3 * t), np.sin(5 * t)], axis=1)
    thetas = coords @ basis.T + 1e-4 * rng.normal(size=(80, 500))
    for centred in (False, True):
        pca = ls.trajectory_pca(thetas, centred=centred)
        assert pca.variance_ratio.sum() == pytest.approx(1.0)
        assert pca.variance_ratio[:2].sum() > 0.999
        # The two directions span the planted plane.
        overlap = np.linalg.svd(pca.directions @ basis, compute_uv=False)
        assert np.allclose(overlap, 1.0, atol=1e-3)
    assert ls.trajectory_pca(thetas).coords.shape == (79, 2)
    # An isotropic cloud has no dominant plane.
    assert ls.trajectory_pca(rng.normal(size=(80, 500)), centred=True).variance_ratio[:2].sum() < 0.1


def test_loss_surface_of_a_quadratic():
    model = nn.Linear(2, 1, bias=False).double()
    x = torch.eye(2, dtype=torch.float64)
    y = torch.zeros(2, dtype=torch.float64)
    mse = lambda out, t: ((out.squeeze(1) - t) ** 2).mean()  # = (w1² + w2²)/2
    center = torch.zeros(2, dtype=torch.float64)
    e1, e2 = torch.eye(2, dtype=torch.float64)
    a, b = np.array([-1.0, 0.0, 2.0]), np.array([0.0, 1.0])
    grid = ls.loss_surface(model, x, y, center, e1, e2, a, b, loss_fn=mse)
    assert grid.shape == (2, 3)
    assert np.allclose(grid, (a[None, :] ** 2 + b[:, None] ** 2) / 2)


def test_spike_detector_finds_planted_spikes_and_none_in_a_smooth_curve():
    steps = np.arange(1, 3001)
    smooth = 2.0 * np.exp(-steps / 200) + 1e-6
    assert ls.find_spikes(smooth, start=100) == []
    spiky = smooth.copy()
    for s in (1200, 2000):
        spiky[s - 1:s + 30] += 0.3 * np.exp(-np.arange(31) / 5)
    assert ls.find_spikes(spiky, start=100) == [1200, 2000]
    # Spikes before memorisation (start) and below the floor are ignored.
    assert ls.find_spikes(spiky, start=1500) == [2000]
    tiny = smooth.copy()
    tiny[1999] += 5e-5
    assert ls.find_spikes(tiny, start=100) == []


def test_recorder_keys_snapshots_by_curve_step_and_keeps_cosines():
    data = modular_arithmetic(7, "+", 0.5, seed=0)
    # A detector with a huge factor never fires; snapshots are then the regular grid.
    run = slingshot_run(data, 30, 0, 1e-2, 0.0, (0.9, 0.98), 8, 16, 10, [-2], [3],
                        ls.SpikeDetector(factor=1e9))
    assert sorted(run.snapshots) == [1, 10, 20, 30] and run.online_spikes == []
    assert len(run.cos_prev) == 30 and np.isnan(run.cos_prev[0]) and np.all(run.cos_prev[1:] < 1)
    # The loss of the weights stored under step k is the k-th entry of the loss curve.
    from replicate.models import ModularMLP
    model = ModularMLP(7, 8, 16)
    for k in (1, 20):
        loss = ls.loss_at(model, torch.from_numpy(run.snapshots[k]), data.train_x, data.train_y)
        assert float(loss) == pytest.approx(run.run.loss[k - 1], rel=1e-5)


def test_recorder_stores_the_window_around_an_online_spike():
    data = modular_arithmetic(7, "+", 0.5, seed=0)
    rec = TrajectoryRecorder(data, 1000, [-2], [3], ls.SpikeDetector(factor=1e9))
    fired = iter([False] * 5 + [True] + [False] * 10)
    rec.detector.update = lambda k, loss: next(fired)

    from replicate.models import ModularMLP
    model = ModularMLP(7, 4, 8)
    for updates in range(12):
        with torch.no_grad():
            model.out.bias += 1.0  # change the weights so that each snapshot differs
        rec(updates, model)
    # Spike at curve step 6: keep step 4 (offset -2), 6 and 9 (offset +3), plus step 1.
    assert sorted(rec.snapshots) == [1, 4, 6, 9]
    assert float(rec.snapshots[9][-1] - rec.snapshots[4][-1]) == pytest.approx(5.0)


def test_transformer_hessian_vector_products_match_the_dense_hessian():
    # Double backward through attention: the HVP must equal the dense Hessian times v.
    from replicate.models import TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(vocab=5, d_model=4, heads=2, layers=1, ffn=6).double()
    x = torch.randint(0, 5, (12, 2))
    y = torch.randint(0, 5, (12,))
    dense = ls.dense_hessian(model, x, y)
    v = torch.randn(dense.shape[0], dtype=torch.float64)
    assert torch.allclose(ls.hvp_operator(model, x, y)(v), dense @ v, atol=1e-8)


def test_lanczos_residuals_say_whether_the_extremes_converged():
    # Against the dense Hessian of a tiny network (44 parameters, indefinite).
    net, (x, y) = tiny_net(), tiny_data()
    true = torch.linalg.eigvalsh(ls.dense_hessian(net, x, y)).numpy()
    for iterations in (3, 5, 8, 12, 20, 44):
        res = ls.hessian_extremes(net, x, y, iterations=iterations)
        # A symmetric matrix has an eigenvalue within the residual of every Ritz value.
        for theta, r in ((res.lambda_max, res.residual_max), (res.lambda_min, res.residual_min)):
            assert np.min(np.abs(true - theta)) <= r + 1e-12
        # Ritz values lie inside the spectrum: too few iterations understate |λ_min|.
        assert true[0] - 1e-12 <= res.lambda_min and res.lambda_max <= true[-1] + 1e-12
    few = ls.hessian_extremes(net, x, y, iterations=5)
    assert few.relative_residual > 0.05  # not converged, and the residual says so ...
    assert few.lambda_min - true[0] > 0.05 * abs(true[0])  # ... with λ_min off by over 5%
    converged = ls.hessian_extremes(net, x, y, iterations=44)
    assert converged.relative_residual < 1e-8
    assert converged.lambda_min == pytest.approx(float(true[0]), rel=1e-8)
    assert converged.norm_estimate == pytest.approx(float(np.max(np.abs(true))), rel=1e-8)


def test_slingshot_hessians_carry_their_lanczos_residuals():
    from replicate.experiments.slingshot import hessians_at, order_of_magnitude, residual_summary
    from replicate.models import algorithmic_model

    data = modular_arithmetic(5, "+", 0.6, seed=0)
    torch.manual_seed(0)
    model = algorithmic_model("mlp", 5, 4, 6)
    dim = sum(p.numel() for p in model.parameters())
    snaps = {1: ls.flat_params(model).numpy()}
    full = hessians_at(data, 4, 6, snaps, iterations=dim)[1]
    short = hessians_at(data, 4, 6, snaps, iterations=4)[1]
    assert full["relative_residual"] < 1e-3 < short["relative_residual"]
    assert short["lambda_min"] >= full["lambda_min"] - 1e-5  # too few iterations: |λ_min| smaller
    summary = residual_summary({1: full, 2: short})
    assert summary["lambda_min"] == pytest.approx(
        short["residual_min"] / max(abs(short["lambda_max"]), abs(short["lambda_min"])))
    assert order_of_magnitude(2e-4) == "<= 1e-03" and order_of_magnitude(0.05) == "<= 1e-01"
    assert order_of_magnitude(1e-3) == "<= 1e-03"


def test_a_slingshot_run_with_patience_stops_at_that_share_of_t4_again_or_at_its_cap(monkeypatch):
    from replicate.experiments import slingshot as sl
    data = modular_arithmetic(7, "+", 0.5, seed=0)
    args = (0, 1e-2, 0.0, (0.9, 0.98), 8, 16, 10, [-2], [3])
    full = slingshot_run(data, 60, *args, ls.SpikeDetector(factor=1e9))
    # a level that the full run reaches early, standing in for 0.99 on this tiny task
    level = float(full.run.val_acc[:20].max())
    t4 = int(np.flatnonzero(full.run.val_acc >= level)[0]) + 1
    assert 0 < level and t4 <= 20
    monkeypatch.setattr(sl, "GROKKED", level)
    stopped = slingshot_run(data, 60, *args, ls.SpikeDetector(factor=1e9), patience=0.5)
    end = math.ceil(1.5 * t4)
    assert len(stopped.run.loss) == len(stopped.cos_prev) == end
    # the same run as the full one, cut at its end
    np.testing.assert_array_equal(stopped.run.loss, full.run.loss[:end])
    np.testing.assert_array_equal(stopped.cos_prev[1:], full.cos_prev[1:end])
    assert max(stopped.snapshots) <= end and set(stopped.snapshots) <= set(full.snapshots)
    # never reached: the run goes on to its cap
    monkeypatch.setattr(sl, "GROKKED", 2.0)
    capped = slingshot_run(data, 60, *args, ls.SpikeDetector(factor=1e9), patience=0.5)
    assert len(capped.run.loss) == 60
