"""The GrokAlign regulariser and the chapter's training runs."""
import numpy as np
import pytest
import torch
from torch import nn

from replicate.experiments import grokalign as ga
from replicate.measures import jacobian
from replicate.models import MLP


def _points(n=4, d=5, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _finite_difference_check(model, penalty, h=1e-6):
    """Compare autograd's gradient of `penalty()` with central differences, entry by entry."""
    params = list(model.parameters())
    # The output layer's bias does not enter the Jacobian: its gradient is None, i.e. zero.
    grads = torch.autograd.grad(penalty(), params, allow_unused=True)
    for p, g in zip(params, grads):
        g = torch.zeros_like(p) if g is None else g
        flat, gflat = p.data.view(-1), g.view(-1)
        for i in range(0, flat.numel(), max(1, flat.numel() // 7)):
            old = flat[i].item()
            flat[i] = old + h
            up = penalty().item()
            flat[i] = old - h
            down = penalty().item()
            flat[i] = old
            assert abs((up - down) / (2 * h) - gflat[i].item()) < 1e-6 * max(1.0, abs(gflat[i].item()))


def test_regulariser_gradient_matches_finite_differences_scalar_output():
    torch.manual_seed(0)
    model = MLP(5, 6, 3, 1).double()
    x = _points()
    _finite_difference_check(model, lambda: jacobian.grokalign_penalty(model, x))


def test_regulariser_gradient_matches_finite_differences_with_projections():
    torch.manual_seed(1)
    model = MLP(5, 6, 2, 3).double()
    x = _points()
    # a fixed projection seed makes the estimate a deterministic function of the parameters
    _finite_difference_check(model, lambda: jacobian.grokalign_penalty(
        model, x, projections=2, generator=torch.Generator().manual_seed(3)))


def test_regularised_loss_adds_lambda_times_the_penalty():
    torch.manual_seed(0)
    model = MLP(5, 6, 2, 1).double()
    x = _points(6)
    base = torch.tensor(0.5, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    assert ga.regularised_loss(model, x, base, 0.0, 0, 1, gen) is base
    expected = 0.5 + 0.3 * jacobian.frobenius_norm_exact(model, x[:4]).mean()
    got = ga.regularised_loss(model, x, base, 0.3, 4, 1, gen)
    assert torch.allclose(got, expected, atol=1e-10)


def _tiny_mnist_config(lam):
    return dict(seed=0, n_train=64, width=16, depth=3, bias=True, init_scale=1.0, lr=1e-3,
                weight_decay=0.01, batch_size=16, loss="ce", lam=lam, reg_points=8, projections=1,
                max_steps=12, eval_every=4, threshold=1.1, jacobian_points=4)


def _tiny_data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g),
            torch.randn(32, 784, generator=g), torch.randint(0, 10, (32,), generator=g))


def test_lambda_zero_is_plain_adamw_training():
    data = _tiny_data()
    config = _tiny_mnist_config(0.0)
    run = ga.train_mnist(config, data=data)
    # the same training by hand: same init, same batches, plain AdamW on cross-entropy
    x, y = data[0], data[1]
    torch.manual_seed(0)
    model = MLP(784, 16, 3, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(1)
    order = torch.randperm(64, generator=gen)
    for t in range(1, 13):
        k = (t - 1) % 4
        if k == 0 and t > 1:
            order = torch.randperm(64, generator=gen)
        idx = order[k * 16:(k + 1) * 16]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    assert run["train_acc"][-1] == acc
    assert not run["reached"] and run["steps"] == 12
    # and a positive lambda does change the trajectory (the comparison above can fail)
    reg = ga.train_mnist(_tiny_mnist_config(1.0), data=data)
    assert reg["jacobian_norm"][-1] != run["jacobian_norm"][-1]


def test_the_grokalign_codes_own_settings_are_float64_the_same_batches_in_order_and_fewer_held_out():
    x, y, test_x, test_y = _tiny_data()
    config = {**_tiny_mnist_config(0.0), "dtype": "float64", "batch_order": "fixed", "n_test": 8}
    run = ga.train_mnist(config, data=(x, y, test_x, test_y))
    # by hand: float64 from the same initialisation, batches 0-15, 16-31, ... every epoch
    torch.manual_seed(0)
    model = MLP(784, 16, 3, 10).double()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for t in range(1, 13):
        k = (t - 1) % 4
        idx = torch.arange(k * 16, (k + 1) * 16)
        loss = nn.functional.cross_entropy(model(x[idx].double()), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(x.double()).argmax(1) == y).float().mean().item()
        held_out = (model(test_x[:8].double()).argmax(1) == test_y[:8]).float().mean().item()
    assert run["train_acc"][-1] == acc and run["test_acc"][-1] == held_out
    assert run["centroid"][-1].dtype == np.float64
    # the shuffled float32 run is another trajectory (the comparison above can fail)
    assert ga.train_mnist(_tiny_mnist_config(0.0), data=(x, y, test_x, test_y))["train_acc"][-1] != acc or \
        ga.train_mnist({**config, "batch_order": "shuffled"}, data=(x, y, test_x, test_y))["jacobian_norm"][-1] \
        != run["jacobian_norm"][-1]


def test_mnist_config_takes_the_optional_settings_only_where_given_and_checks_the_order():
    params = {**{k: 1 for k in ga.MNIST_KEYS}, "estimator": "output"}
    assert "dtype" not in ga.mnist_config(params, 0.0, "ce", 0)
    config = ga.mnist_config({**params, "dtype": "float64", "batch_order": "fixed"}, 0.0, "ce", 0)
    assert config["dtype"] == "float64" and config["batch_order"] == "fixed"
    with pytest.raises(ValueError, match="batch_order"):
        ga.mnist_config({**params, "batch_order": "sorted"}, 0.0, "ce", 0)


def test_run_stops_at_the_threshold():
    config = {**_tiny_mnist_config(0.0), "threshold": -1.0}
    run = ga.train_mnist(config, data=_tiny_data())
    assert run["reached"] and run["steps_to_threshold"] == 0 and len(run["step"]) == 1


def test_xor_data():
    x, y = ga.xor_data(50, 20, 0.05, torch.Generator().manual_seed(0))
    assert x.shape == (50, 20)
    assert torch.equal(x[:, :2].abs(), torch.ones(50, 2))
    assert torch.allclose(x[:, 2:].abs(), torch.full((50, 18), 0.05))
    assert torch.equal(y, x[:, 0] * x[:, 1])


def test_first_step():
    assert ga.first_step([0, 10, 20], [0.1, 0.9, 0.95], 0.9) == 10
    assert ga.first_step([0, 10], [0.1, 0.2], 0.9) is None


def test_objectives_are_the_task_loss_plus_lambda_times_the_penalty():
    torch.manual_seed(0)
    model = MLP(5, 6, 3, 3).double()
    x, y = _points(6), torch.tensor([0, 1, 2, 0, 1, 2])
    fit, loss = ga.objective(model, x, y, "ce", 0.3, 4, 2, torch.Generator().manual_seed(7), "input", 3)
    assert torch.allclose(fit, nn.functional.cross_entropy(model(x), y))
    q, z = jacobian.subspace_probes(2, 4, 3, 5, torch.Generator().manual_seed(7), like=x)
    _, ju = jacobian.forward_with_jvp(model, x[:4], q, mix=z)
    expected = fit + 0.3 * (jacobian.frobenius_sq_from_jvp(ju) + 1e-12).sqrt().mean()
    assert torch.allclose(loss, expected, atol=1e-12)
    # the output-side estimator gives the reference's value for the same random signs
    _, out_loss = ga.objective(model, x, y, "ce", 0.3, 4, 1, torch.Generator().manual_seed(7), "output")
    _, ref_loss = ga.objective(model, x, y, "ce", 0.3, 4, 1, torch.Generator().manual_seed(7), "vjp")
    assert torch.allclose(out_loss, ref_loss, atol=1e-12)
    # lambda 0: the plain loss, whatever the estimator
    fit0, loss0 = ga.objective(model, x, y, "ce", 0.0, 4, 2, torch.Generator(), "input")
    assert loss0 is fit0


def test_forward_and_reference_objectives_agree_on_average():
    # Both estimate the same ||J||_F^2; with many probes the penalties agree.
    torch.manual_seed(0)
    model = MLP(5, 6, 3, 3).double()
    x, y = _points(6), torch.tensor([0, 1, 2, 0, 1, 2])
    exact = jacobian.frobenius_norm_exact(model, x).mean()
    for est in ("input", "output", "vjp"):
        fit, loss = ga.objective(model, x, y, "mse", 1.0, 0, 4000, torch.Generator().manual_seed(1), est)
        assert abs((loss - fit).item() - exact.item()) < 0.03 * exact.item()


def test_bad_estimator_and_loss_are_refused_before_training():
    import pytest

    params = {k: 1 for k in ga.MNIST_KEYS} | {"estimator": "magic"}
    with pytest.raises(ValueError, match="estimator"):
        ga.mnist_config(params, 0.1, "mse", 0)
    with pytest.raises(ValueError, match="loss"):
        ga.mnist_config({**params, "estimator": "output"}, 0.1, "hinge", 0)


def test_output_estimator_training_shrinks_the_jacobian():
    data = _tiny_data()
    fast = {"lr": 1e-2, "init_scale": 4.0}
    plain = ga.train_mnist({**_tiny_mnist_config(0.0), **fast}, data=data)
    reg = ga.train_mnist({**_tiny_mnist_config(1.0), **fast, "estimator": "output"}, data=data)
    assert reg["steps"] == plain["steps"] == 12
    # the regulariser does its job: a smaller Jacobian than weight decay alone
    assert reg["jacobian_norm"][-1] < plain["jacobian_norm"][-1]


def test_speedup_is_a_ratio_of_measured_steps_or_a_lower_bound():
    crossed = lambda t: {"reached": True, "steps_to_threshold": t, "steps": t}  # noqa: E731
    missed = lambda cap: {"reached": False, "steps_to_threshold": None, "steps": cap}  # noqa: E731
    assert ga.speedup(crossed(9000), crossed(3000)) == (3.0, "")
    assert ga.speedup(missed(12000), crossed(3000)) == (4.0, "lower")
    # GrokAlign stopped without crossing after the baseline's count: at most 1x
    assert ga.speedup(crossed(9000), missed(9000)) == (1.0, "upper")
    assert ga.speedup(crossed(9000), missed(4000)) == (None, "")
    assert ga.speedup(missed(9000), missed(9000)) == (None, "")


def test_update_costs_times_every_variant(one_thread):
    config = dict(n_train=64, seed=0, width=8, depth=3, bias=True, init_scale=1.0, lr=1e-3,
                  weight_decay=0.01, batch_size=16, loss="mse", projections=1, reg_points=16)
    variants = {"plain": {"lam": 0.0}, "fwd": {"lam": 0.1, "estimator": "input"}}
    costs = ga.update_costs(config, variants, repeats=3, warmup=1)
    assert set(costs) == {"plain", "fwd"} and all(c > 0 for c in costs.values())
    times = ga.update_times(config, variants, repeats=4, warmup=0)
    assert all(len(t) == 4 for t in times.values())


def test_paired_ratios_are_the_median_of_same_round_ratios():
    # the load rises halfway (rounds 4-5 slower for both kinds), and a burst hits round 3's
    # regularised update alone
    times = {"plain": [1.0, 1.0, 1.0, 9.0, 9.0], "reg": [1.4, 1.4, 9.0, 12.6, 12.6]}
    ratios = ga.paired_ratios(times)
    assert ratios["plain"] == 1.0
    assert ratios["reg"] == pytest.approx(1.4)
    # the ratio of the two medians would be 9.0: the pairing is what this test checks
    assert float(np.median(times["reg"]) / np.median(times["plain"])) == pytest.approx(9.0)


def test_xor_penalty_is_the_exact_jacobian_norm():
    # the XOR network has a scalar output: its penalty is the exact mean ||J||_F (no estimate)
    torch.manual_seed(0)
    model = MLP(20, 8, 2, 1, bias=False).double()
    x, _ = ga.xor_data(30, 20, 0.05, torch.Generator().manual_seed(1))
    x = x.double()
    _, sq = jacobian.forward_with_vjp_norm(model, x, torch.ones(30, 1, dtype=torch.float64))
    assert torch.allclose(sq.sqrt().mean(), jacobian.frobenius_norm_exact(model, x).mean(), atol=1e-12)


def _xor_config(basis, lam, noise_draws=0):
    return dict(seed=3, n=40, dim=300, eps=0.05, width=16, lr=0.1, weight_decay=0.1, lam=lam,
                steps=120, eval_points=8, amplitudes=[0.2, 1.0], noise_draws=noise_draws,
                dtype="float64", basis=basis)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_the_reduced_xor_run_is_the_direct_run(lam):
    # Training in the span of the inputs and the initial rows is the same run: the first layer
    # mapped back to the p coordinates, the accuracies and the centroid statistics agree.
    direct = ga.train_xor(_xor_config("direct", lam), keep_weights=True)
    reduced = ga.train_xor(_xor_config("reduced", lam), keep_weights=True)
    assert reduced["first_layer"].shape == direct["first_layer"].shape == (16, 300)
    scale = np.abs(direct["first_layer"]).max()
    assert np.abs(reduced["first_layer"] - direct["first_layer"]).max() < 1e-6 * scale
    for key in ("train_acc", "test_acc"):
        assert np.array_equal(reduced[key], direct[key])
    for key in ("centroid_norm", "alignment"):
        assert np.allclose(reduced[key], direct[key], rtol=1e-6, atol=1e-9)
    # the run moved: a test that compared two untrained networks could not fail
    assert reduced["centroid_norm"][-1] != pytest.approx(reduced["centroid_norm"][0], rel=0.01)


def test_the_reduced_basis_is_orthonormal_and_projects_the_noise_exactly():
    gen = torch.Generator().manual_seed(0)
    x, _ = ga.xor_data(20, 60, 0.05, gen)
    basis = ga.InputBasis(torch.cat([x, torch.randn(8, 60, generator=gen)]), 60)
    rows = basis.to_full(torch.eye(28))  # B itself, 28 x 60
    assert torch.allclose(rows @ rows.T, torch.eye(28, dtype=torch.float64), atol=1e-12)
    # B n for n Gaussian on coordinates 2.. has covariance B_S B_S^T (S: the noise coordinates)
    cov = rows[:, 2:] @ rows[:, 2:].T
    assert torch.allclose(basis.noise_root @ basis.noise_root.T, cov, atol=1e-12)
    assert not torch.allclose(cov, torch.eye(28, dtype=torch.float64), atol=1e-3)
    # a training input is in the span: its projection keeps its norm
    assert torch.allclose(basis.project(x).norm(dim=1), x.double().norm(dim=1), atol=1e-12)


def test_fresh_xor_noise_draws_are_averaged_into_the_robust_accuracy():
    run = ga.train_xor(_xor_config("reduced", 0.0, noise_draws=3))
    assert run["robust_acc"].shape == (len(run["eval_steps"]), 2)
    # three draws of 40 points: every average is a multiple of 1/120, and some are not of 1/40
    assert np.allclose(run["robust_acc"] * 120, np.round(run["robust_acc"] * 120))
    assert not np.allclose(run["robust_acc"] * 40, np.round(run["robust_acc"] * 40))


def test_robustness_onsets_and_the_rule_for_sooner():
    run = {"eval_steps": np.array([0, 10, 20]),
           "robust_acc": np.array([[0.5, 0.5], [0.96, 0.5], [0.99, 0.9]])}
    assert ga.robustness_onsets(run, 0.95) == [10, None]
    counts = ga.earlier_onsets([10, 20, None, 30, None], [5, 20, 40, 50, None])
    assert counts == {"grokalign": 2, "weight decay": 1, "tie": 1, "neither": 1}
    assert ga.sooner_at_most_amplitudes(counts)
    assert not ga.sooner_at_most_amplitudes({"grokalign": 1, "weight decay": 1, "tie": 3,
                                             "neither": 0})
    assert not ga.sooner_at_most_amplitudes({"grokalign": 0, "weight decay": 0, "tie": 2,
                                             "neither": 3})


def test_the_mean_squared_error_is_a_tenth_of_the_summed_one():
    out = _points(6, 10).float()
    y = torch.tensor([0, 1, 2, 3, 4, 5])
    summed, mean = ga.task_loss(out, y, "mse"), ga.task_loss(out, y, "mse_mean")
    assert mean.item() == pytest.approx(summed.item() / 10)
    assert mean.item() == pytest.approx(nn.functional.mse_loss(
        out, nn.functional.one_hot(y, 10).float()).item())


def test_the_diagnostics_run_at_every_evaluation_first_then_log_spaced():
    steps = range(0, 40 * 400 + 1, 40)  # 400 evaluations of a run of 16,000 updates
    done = []
    for i, t in enumerate(steps):
        if ga.wants_diagnostics(i, t, done, 1.05):
            done.append(t)
    assert done[:40] == list(range(0, 1600, 40))  # the first 40 evaluations, all of them
    later = np.array(done[40:], dtype=float)
    assert np.all(later[1:] / later[:-1] >= 1.05) and np.all(later[1:] - later[:-1] <= 0.05 * later[:-1] + 40)
    # at most ln(16000 / 1560) / ln(1.05) = 48 after the dense ones (fewer: steps are multiples of 40)
    assert 40 + 30 < len(done) <= 40 + 48
    assert all(ga.wants_diagnostics(i, t, [], None) for i, t in enumerate(steps))  # no growth: all


def test_log_spaced_diagnostics_leave_the_accuracies_and_the_crossing_as_they_were():
    config = {"n_train": 64, "width": 16, "depth": 3, "bias": True, "init_scale": 1.0, "lr": 1e-2,
              "weight_decay": 1e-2, "batch_size": 32, "loss": "ce", "lam": 0.0, "reg_points": 8,
              "projections": 1, "max_steps": 1000, "eval_every": 10, "threshold": 0.99,
              "jacobian_points": 4, "seed": 0}
    data = ga.mnist_data(64, 0)
    every = ga.train_mnist(config, data)
    sparse = ga.train_mnist({**config, "diagnostics_growth": 1.2}, data)
    for key in ("step", "train_acc", "test_acc"):
        np.testing.assert_array_equal(sparse[key], every[key])
    assert sparse["reached"] == every["reached"] and sparse["steps"] == every["steps"]
    np.testing.assert_array_equal(every["diagnostic_step"], every["step"])
    kept = np.searchsorted(every["step"], sparse["diagnostic_step"])
    assert len(kept) < len(every["step"]) and sparse["diagnostic_step"][-1] == every["step"][-1]
    for key in ("jacobian_norm", "alignment"):
        np.testing.assert_allclose(sparse[key], every[key][kept], rtol=1e-6)
