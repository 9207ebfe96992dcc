"""APGD against the closed-form worst case of a linear classifier, against PGD (it must find at
least as many adversarial points) and against torchattacks' APGD on the same network."""
import importlib.util

import pytest
import torch
from torch import nn

from replicate.measures.adversarial import robust_accuracy
from replicate.measures.apgd import apgd_linf, apgd_robust_accuracy, checkpoints
from replicate.models import MLP
from test_adversarial import linear_case  # logits [0, w.x + b]: a closed-form worst case

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_step_sizes_are_reconsidered_at_the_papers_checkpoints():
    # p = 0.22, 0.41, 0.57, 0.70, 0.80, 0.87, 0.93, 0.99 of the budget (the gaps shrink by 0.03
    # down to 0.06)
    assert checkpoints(100) == [22, 41, 57, 70, 80, 87, 93, 99]
    assert checkpoints(1000)[:3] == [220, 410, 570]


def test_apgd_breaks_exactly_the_points_a_linear_classifier_cannot_defend():
    model, w, b, x, y = linear_case(300)
    eps = 0.1
    margin = torch.where(y == 1, 1.0, -1.0) * (x @ w + b)
    breakable = margin - eps * w.abs().sum() < 0  # the corner of the eps-box crosses the boundary
    adv, broken = apgd_linf(model, x, y, eps, steps=20)
    assert torch.equal(broken, breakable | (margin < 0))
    assert 0.05 < breakable.double().mean() < 0.95  # both kinds of point are there
    assert ((adv - x).abs() <= eps + 1e-12).all()
    assert apgd_robust_accuracy(model, x, y, eps, steps=20) == pytest.approx(
        float((~breakable & (margin > 0)).double().mean()))


def small_mnist_like(seed=0):
    """A 784-64-64-10 MLP trained for 300 full-batch steps on 500 MNIST digits, and 400 other
    digits to attack: robust accuracy falls gradually with eps there, so attacks differ."""
    from replicate.data import load_mnist
    mnist = load_mnist(verbose=False)
    x, y = mnist.test_x.reshape(-1, 784).float(), mnist.test_y
    torch.manual_seed(seed)
    model = MLP(784, 64, 3, 10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[:500]), y[:500]).backward()
        opt.step()
    return model.eval(), x[500:900], y[500:900]


def test_apgd_is_at_least_as_strong_as_pgd_and_leaves_the_model_as_it_was():
    model, x, y = small_mnist_like()
    flags = [p.requires_grad for p in model.parameters()]
    before = [p.detach().clone() for p in model.parameters()]
    for eps in (0.03, 0.08):
        pgd = robust_accuracy(model, x, y, [eps], alpha=eps / 4, steps=20)[eps]
        apgd = apgd_robust_accuracy(model, x, y, eps, steps=20)
        assert apgd <= pgd + 1e-9
    assert 0.1 < apgd < 0.8  # neither attack is trivial here (0.225 at eps 0.08)
    assert [p.requires_grad for p in model.parameters()] == flags and not model.training
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.skipif(importlib.util.find_spec("torchattacks") is None,
                    reason="torchattacks not installed (make venv installs it without its "
                           "dependencies: pip install --no-deps torchattacks==3.5.1)")
def test_apgd_breaks_as_many_points_as_torchattacks_apgd():
    import torchattacks
    model, x, y = small_mnist_like()
    # torchattacks attacks images: the same network behind a flattening layer, on 1x28x28 inputs
    images, on_images = x.reshape(-1, 1, 28, 28), nn.Sequential(nn.Flatten(), model).eval()
    for eps in (0.03, 0.08):
        ours = apgd_robust_accuracy(model, x, y, eps, steps=50)
        attack = torchattacks.APGD(on_images, norm="Linf", eps=eps, steps=50, loss="ce", seed=0)
        with torch.no_grad():
            theirs = float((on_images(attack(images, y)).argmax(1) == y).float().mean())
        # Different random starts: the two robust accuracies agree within 2 points of 400
        # (measured: 0.7025 and 0.7025 at 0.03, 0.2250 and 0.2275 at 0.08; clean 0.865).
        assert abs(ours - theirs) <= 0.02 + 1e-9, (eps, ours, theirs)
