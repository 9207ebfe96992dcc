import math

import numpy as np
import pytest
import torch

from replicate.measures import objectives
from replicate.harness.bench_peers import torch_optim_race


def autograd(f, x):
    x = x.clone().requires_grad_(True)
    f(x).sum().backward()
    return x.grad


@pytest.fixture
def points():
    return torch.randn(50, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2


def test_rosenbrock_value_by_hand():
    # n = 2: 100 (x2 - x1^2)^2 + (x1 - 1)^2 at (0.5, 2): 100 * 1.75^2 + 0.25
    assert objectives.rosenbrock(torch.tensor([0.5, 2.0])).item() == pytest.approx(306.5)
    # n = 4 is a sum over independent pairs
    assert objectives.rosenbrock(torch.tensor([0.5, 2.0, 0.0, 0.0])).item() == pytest.approx(306.5 + 1.0)


def test_rosenbrock_gradient_closed_form_equals_autograd(points):
    assert torch.allclose(objectives.rosenbrock_grad(points), autograd(objectives.rosenbrock, points))


def test_rastrigin_gradient_closed_form_equals_autograd(points):
    for a in (10.0, 3.0):
        assert torch.allclose(objectives.rastrigin_grad(points, a), autograd(lambda x: objectives.rastrigin(x, a), points))


def test_minima_are_zero_and_stationary():
    ones, zeros = torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    assert objectives.rosenbrock(ones).item() == 0 and objectives.rosenbrock_extended(ones).item() == 0
    assert objectives.rastrigin(zeros).item() == pytest.approx(0.0, abs=1e-12)
    assert torch.count_nonzero(objectives.rosenbrock_grad(ones)) == 0
    assert torch.allclose(objectives.rastrigin_grad(zeros), zeros)


def test_seed_error_minus_one_one_is_not_stationary():
    grad = objectives.rosenbrock_grad(torch.tensor([-1.0, 1.0], dtype=torch.float64))
    assert grad.tolist() == [-4.0, 0.0]


def test_rastrigin_is_multimodal():
    # A local minimum near (1, 0) with a higher value than the global one.
    x = torch.tensor([0.99496, 0.0], dtype=torch.float64)
    assert objectives.rastrigin_grad(x).abs().max() < 1e-3
    assert objectives.rastrigin(x).item() > 0.9


def test_log_scale_depth_and_bad_offset():
    f = objectives.log_scale(objectives.rosenbrock, 1e-8)
    assert f(torch.ones(2, dtype=torch.float64)).item() == pytest.approx(math.log(1e-8))
    with pytest.raises(ValueError, match="positive"):
        objectives.log_scale(objectives.rosenbrock, 0.0)
    with pytest.raises(ValueError, match="even number"):
        objectives.rosenbrock(torch.zeros(3))


@pytest.mark.parametrize("optimizer", sorted(objectives.OPTIMIZERS))
@pytest.mark.parametrize("function, start", [("rosenbrock", [-2.0, 2.0]), ("rastrigin", [-2.0, 3.5])])
def test_every_row_of_the_grid_follows_torch_optim_run_on_its_learning_rate_alone(optimizer,
                                                                                   function, start):
    # 300 steps of the chapter's log-scaled objectives, at learning rates from the chapter's grid
    # that converge, oscillate and (for SGD at 0.3) leave the start far behind.
    base = objectives.rosenbrock if function == "rosenbrock" else objectives.rastrigin
    f, lrs = objectives.log_scale(base, 1e-8), [1e-4, 1e-3, 1e-2]
    grid = objectives.optimizer_race(f, start, optimizer, lrs, 300)
    alone = torch_optim_race(f, start, optimizer, lrs, 300)
    np.testing.assert_allclose(grid, alone, rtol=1e-9, atol=1e-12)


def test_a_row_of_the_grid_does_not_depend_on_the_other_rows():
    f = objectives.log_scale(objectives.rosenbrock, 1e-8)
    together = objectives.optimizer_race(f, [-2.0, 2.0], "adam", [1e-3, 1e-2], 100)
    for i, lr in enumerate([1e-3, 1e-2]):
        alone = objectives.optimizer_race(f, [-2.0, 2.0], "adam", [lr], 100)
        np.testing.assert_array_equal(together[:, i], alone[:, 0])
    with pytest.raises(ValueError, match="valid"):
        objectives.optimizer_race(f, [0.0, 0.0], "lbfgs", [0.1], 1)


def test_gradient_descent_converges_on_plain_rosenbrock():
    path = objectives.optimizer_race(objectives.rosenbrock, [-1.0, 1.0], "adam", [0.02], 5000)
    assert objectives.distance_to(path, objectives.MINIMA["rosenbrock"])[-1, 0] < 0.05


def test_double_descent_found_when_planted_and_not_in_monotone_curve():
    t = np.arange(400)
    planted = np.concatenate([np.linspace(3, 1, 100), np.linspace(1, 1.6, 100), np.linspace(1.6, 0.1, 200)])
    found = objectives.double_descent(planted)
    assert found is not None and found["m1"] == pytest.approx(1.0, abs=0.05)
    assert objectives.double_descent(3 * np.exp(-t / 50)) is None
    # a rise that never comes back below m1 is not a double descent
    assert objectives.double_descent(np.concatenate([np.linspace(3, 1, 100), np.linspace(1, 2, 300)])) is None
    assert objectives.double_descent(np.full(50, np.inf)) is None


def test_distance_marks_divergence_as_inf():
    path = np.array([[[0.0, 0.0]], [[np.nan, 1.0]]])
    assert np.isinf(objectives.distance_to(path, (0.0, 0.0))[1, 0])
