"""PGD against the closed-form worst case of a linear classifier, and its constraints."""
import numpy as np
import pytest
import torch
from torch import nn

from replicate.measures.adversarial import first_index_above, pgd_linf, robust_accuracy, settling_index
from replicate.models import MLP


pytestmark = pytest.mark.usefixtures("one_thread")


def linear_two_class(dim=30, seed=0):
    """logits = [0, w.x + b]: the l_inf worst case is known in closed form."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, generator=gen, dtype=torch.float64)
    layer = nn.Linear(dim, 2).double()
    with torch.no_grad():
        layer.weight.copy_(torch.stack([torch.zeros(dim, dtype=torch.float64), w]))
        layer.bias.copy_(torch.tensor([0.0, 0.1], dtype=torch.float64))
    return layer, w, 0.1


def linear_case(n: int):
    """`linear_two_class` with n points away from 0 and 1 (so the eps-box stays inside the data
    range) and random labels: (model, w, b, x, y)."""
    model, w, b = linear_two_class()
    gen = torch.Generator().manual_seed(1)
    x = 0.3 + 0.4 * torch.rand(n, 30, generator=gen, dtype=torch.float64)
    return model, w, b, x, torch.randint(0, 2, (n,), generator=gen)


def test_pgd_finds_the_worst_case_of_a_linear_classifier():
    model, w, b, x, y = linear_case(200)
    eps = 0.1
    adv = pgd_linf(model, x, y, eps, alpha=0.02, steps=20)
    # Class 1 loses by moving against w, class 0 by moving along it: a corner of the eps-box.
    direction = torch.where(y[:, None] == 1, -1.0, 1.0) * torch.sign(w)
    assert torch.allclose(adv, x + eps * direction, rtol=0, atol=1e-12)
    margin = torch.where(y == 1, 1.0, -1.0) * (x @ w + b)
    expected = (margin - eps * w.abs().sum() > 0).double().mean().item()
    assert robust_accuracy(model, x, y, [eps], alpha=0.02, steps=20)[eps] == pytest.approx(expected)
    assert 0.05 < expected < 0.95  # the closed form separates robust from broken points here


def test_pgd_stays_in_the_eps_ball_and_the_data_range():
    torch.manual_seed(0)
    model = MLP(784, 64, 3, 10).eval()
    gen = torch.Generator().manual_seed(2)
    x = (torch.rand(64, 784, generator=gen) > 0.6).float() * torch.rand(64, 784, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)
    eps = torch.tensor([0.03, 0.2]).repeat_interleave(32)
    adv = pgd_linf(model, x, y, eps, alpha=0.05, steps=10)
    assert ((adv - x).abs() <= eps[:, None] + 1e-6).all()
    assert adv.min() >= 0.0 and adv.max() <= 1.0
    assert ((adv - x).abs().amax(1) > 0.9 * eps).all()  # the attack did move


def test_robust_accuracy_never_exceeds_clean_accuracy():
    torch.manual_seed(3)
    model = MLP(20, 32, 3, 3).eval()
    gen = torch.Generator().manual_seed(4)
    x = torch.rand(300, 20, generator=gen)
    y = model(x).argmax(1)
    y[:100] = torch.randint(0, 3, (100,), generator=gen)  # some points wrong when clean
    clean = (model(x).argmax(1) == y).float().mean().item()
    robust = robust_accuracy(model, x, y, [0.0, 0.01, 0.05, 0.2], alpha=0.02, steps=10)
    assert robust[0.0] == pytest.approx(clean)  # eps = 0 cannot move a point
    assert all(acc <= clean for acc in robust.values())
    assert robust[0.2] < robust[0.01]  # and a larger ball breaks more points here


def test_attack_leaves_the_model_untouched():
    torch.manual_seed(5)
    model = MLP(10, 8, 2, 2)
    x, y = torch.rand(5, 10), torch.zeros(5, dtype=torch.long)
    pgd_linf(model, x, y, 0.1, 0.05, 3)
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def test_settling_and_onset_indices():
    acc = np.array([0.1, 0.5, 0.90, 0.95, 0.91, 0.905, 0.912])
    assert settling_index(acc, 0.01) == 4  # 0.90 is 0.012 from the final 0.912, 0.95 is 0.038
    assert settling_index(np.array([0.1, 0.92, 0.93, 0.90]), 0.01) == 3  # 0.92 is 0.02 away
    assert settling_index(np.array([0.1, 0.905, 0.95, 0.90]), 0.01) == 1  # a later excursion is ignored
    assert settling_index(np.ones(3), 0.01) == 0
    assert first_index_above(acc, 0.9) == 3
    assert first_index_above(acc, 0.9, start=4) == 4
    assert first_index_above(acc, 0.99) is None


def mixed_case(seed=6):
    """An MLP and 120 points in [0, 1]^20 of which it gets some wrong, with two eps per point."""
    torch.manual_seed(seed)
    model = MLP(20, 32, 3, 3).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.rand(120, 20, generator=gen)
    y = model(x).argmax(1)
    y[::4] = (y[::4] + 1) % 3
    return model, x, y


def clip_then_clip(model, x0, y, eps, alpha, steps, start):
    """PGD as its definition reads: a sign step, the clip to the eps-ball, then to [0, 1]."""
    adv = start.clone()
    for _ in range(steps):
        adv.requires_grad_(True)
        loss = nn.functional.cross_entropy(model(adv), y, reduction="sum")
        (grad,) = torch.autograd.grad(loss, adv)
        with torch.no_grad():
            adv = adv + alpha * grad.sign()
            adv = torch.maximum(torch.minimum(adv, x0 + eps), x0 - eps).clamp(0.0, 1.0)
    return adv.detach()


@pytest.mark.parametrize("random_start", [False, True])
def test_a_pgd_step_is_the_clip_to_the_ball_then_to_the_data_range(random_start):
    model, x, y = mixed_case()
    eps = torch.tensor([0.05, 0.3]).repeat_interleave(60)[:, None]
    start = x.clone()
    if random_start:  # pgd_linf's start, drawn the same way
        noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
        start = (x + (2 * noise - 1) * eps).clamp(0.0, 1.0)
    expected = clip_then_clip(model, x, y, eps, 0.04, 8, start)
    got = pgd_linf(model, x, y, eps[:, 0], alpha=0.04, steps=8, random_start=random_start)
    assert torch.equal(got, expected)  # one clamp to the box selects the same floats
    outside = (x - eps < 0) & (got == 0.0)  # where the ball reaches past 0, the range's clip acts
    assert outside.any()


def test_attacking_some_rows_gives_them_the_attack_they_get_in_the_whole_batch():
    model, x, y = mixed_case()
    eps = torch.tensor([0.05, 0.3]).repeat_interleave(60)
    rows = torch.arange(120) % 3 != 0
    whole = pgd_linf(model, x, y, eps, alpha=0.04, steps=8)
    some = pgd_linf(model, x, y, eps, alpha=0.04, steps=8, rows=rows)
    assert torch.allclose(some[rows], whole[rows], rtol=0, atol=1e-6)
    assert torch.equal(some[~rows], x[~rows])
    assert not torch.equal(whole[~rows], x[~rows])  # those rows would have moved


def test_robust_accuracy_is_what_attacking_every_point_gives():
    model, x, y = mixed_case()
    epsilons = [0.02, 0.1, 0.3]
    n = len(y)
    adv = pgd_linf(model, x.repeat(3, 1), y.repeat(3), torch.tensor(epsilons).repeat_interleave(n),
                   alpha=0.03, steps=10)
    with torch.no_grad():
        clean_ok = model(x).argmax(1) == y
        adv_ok = (model(adv).argmax(1) == y.repeat(3)).reshape(3, n)
    expected = (adv_ok & clean_ok).float().mean(1).tolist()
    assert clean_ok.float().mean() < 0.9  # some points are skipped
    got = robust_accuracy(model, x, y, epsilons, alpha=0.03, steps=10)
    assert list(got.values()) == pytest.approx(expected, abs=1e-9)
    assert expected[0] > expected[2]
