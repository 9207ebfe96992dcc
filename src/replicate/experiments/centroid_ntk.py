"""Chapter 03: a scalar-output ReLU network separating MNIST zeros from ones, with its centroids
and its empirical NTK measured at log-spaced checkpoints, in the rich and in the lazy regime.

Setup as in GrokAlign's `comparison_to_ntk.py`: bias-free MLP, normalised MNIST,
the first `n_per_class` digits of each class, full-batch SGD on binary cross-entropy.

Lazy control (Chizat & Bach): the trained model is F(x) = s (f_theta(x) - f_theta0(x)) with a
large s and the learning rate divided by s^2. F starts at zero and fits the data, while theta
moves O(1/s), so the network f_theta, and with it its NTK and centroids, barely changes. s = 1
with no centering is the ordinary ("rich") run. The centroids and the NTK are always those of the
network f_theta; the model F's own centroid is s (c_theta - c_theta0), and by Euler's identity
<c_F(x), x> = F(x) (reported separately).
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from ..measures import jacobian, ntk
from ..data import load_mnist
from ..models import MLP
from ..runtime import device
from ..training import cached_run, log_spaced_steps, train_loop

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # the normalisation of the reference code


def first_per_class(x: torch.Tensor, y: torch.Tensor, digits: tuple[int, int], n_per_class: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n_per_class` examples of each of two digits, in data order, labelled 0 / 1."""
    picked = []
    for d in digits:
        idx = torch.nonzero(y == d).flatten()
        if len(idx) < n_per_class:
            raise ValueError(f"only {len(idx)} examples of digit {d} available, asked for {n_per_class}")
        picked.append(idx[:n_per_class])
    idx = torch.sort(torch.cat(picked)).values  # keep data order, as the reference's loader does
    return x[idx], (y[idx] == digits[1]).long()


def binary_mnist(n_per_class: int, digits=(0, 1)):
    """(train_x, train_y, test_x, test_y) for the two digits, normalised; labels 0 / 1."""
    mnist = load_mnist(verbose=False)
    train_x, train_y = first_per_class(mnist.train_x, mnist.train_y, digits, n_per_class)
    keep = (mnist.test_y == digits[0]) | (mnist.test_y == digits[1])
    test_x, test_y = mnist.test_x[keep], (mnist.test_y[keep] == digits[1]).long()
    norm = lambda t: (t - MNIST_MEAN) / MNIST_STD  # noqa: E731
    return norm(train_x), train_y, norm(test_x), test_y


class LazyModel(nn.Module):
    """F(x) = s (f(x) - f_0(x)) with f_0 a frozen copy of f at initialisation."""

    def __init__(self, net: nn.Module, scale: float):
        super().__init__()
        self.net, self.scale = net, scale
        self.initial = copy.deepcopy(net).requires_grad_(False)

    def forward(self, x):
        return self.scale * (self.net(x) - self.initial(x))


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(v):
        v = np.asarray(v, dtype=float)
        order = np.argsort(v, kind="mergesort")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for value in np.unique(v):  # average the ranks of tied values
            tied = v == value
            r[tied] = r[tied].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def _train(config: dict) -> dict:
    dev = device()
    dtype = torch.float64 if config["float64"] else torch.float32
    train_x, train_y, test_x, test_y = (t.to(dev) for t in binary_mnist(config["n_per_class"]))
    train_x, test_x = train_x.to(dtype), test_x.to(dtype)
    torch.manual_seed(config["seed"])
    net = MLP(784, config["width"], config["depth"], 1, bias=False,
              init_scale=config["init_scale"]).to(dev, dtype)
    s = config["output_scale"]
    model = LazyModel(net, s) if config["lazy"] else net
    lr = config["lr"] / s ** 2 if config["lazy"] else config["lr"]
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    targets = train_y.to(dtype).unsqueeze(1)
    bce = nn.BCEWithLogitsLoss()

    # The tracked points: x0 (the first training point, as in the reference) and the next ones.
    tracked = train_x[:config["tracked_points"]]
    tracked_sign = (2 * train_y[:config["tracked_points"]] - 1).to(dtype)  # y in {-1, +1}
    gen = torch.Generator().manual_seed(config["seed"] + 1)
    ntk_idx = torch.randperm(len(train_y), generator=gen)[:config["ntk_points"]].to(dev)
    ntk_x = train_x[ntk_idx]
    log: dict[str, list] = {k: [] for k in ["train_acc", "test_acc", "train_loss", "output", "inner",
                                            "cosine", "norm", "model_output", "model_inner",
                                            "ntk_change", "ntk_alignment", "ntk_mean_x0", "centroid_x0"]}
    k0 = {}

    def step(t: int) -> float:
        loss = bce(model(train_x), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    def evaluate(t: int) -> dict:
        with torch.no_grad():
            out_train, out_test = model(train_x), model(test_x)
            log["train_loss"].append(bce(out_train, targets).item())
            log["train_acc"].append(((out_train[:, 0] > 0).long() == train_y).double().mean().item())
            log["test_acc"].append(((out_test[:, 0] > 0).long() == test_y).double().mean().item())
        stats = jacobian.centroid_statistics(net, tracked)
        for key in ("output", "inner", "cosine", "norm"):
            log[key].append(stats[key].cpu().numpy())
        model_stats = jacobian.centroid_statistics(model, tracked)
        log["model_output"].append(model_stats["output"].cpu().numpy())
        log["model_inner"].append(model_stats["inner"].cpu().numpy())
        log["centroid_x0"].append(jacobian.centroids(net, tracked[:1])[0].cpu().float().numpy())
        # The NTK of the network f_theta on the subset plus x0 (the lazy model's NTK is s^2 times it).
        kernel = ntk.empirical_ntk(net, torch.cat([tracked[:1], ntk_x])).cpu()
        if not k0:
            k0["K"] = kernel
        log["ntk_change"].append(ntk.relative_change(kernel, k0["K"]))
        log["ntk_alignment"].append(ntk.kernel_alignment(kernel, k0["K"]))
        log["ntk_mean_x0"].append(kernel[0, 1:].mean().item())
        return {}

    eval_steps = log_spaced_steps(config["steps"], config["eval_points"])
    train_loop(step, config["steps"], eval_steps, evaluate,
               desc="lazy run" if config["lazy"] else "rich run")
    result = {k: np.array(v) for k, v in log.items()}
    result.update(eval_steps=np.array(eval_steps), config=dict(config), tracked_sign=tracked_sign.cpu().numpy(),
                  x0=tracked[0].cpu().float().numpy())
    return result


def run_centroid_ntk(**config) -> dict:
    """Train (or fetch from the run cache) one run; `config` holds every setting (see the presets):
    n_per_class, width, depth, init_scale, steps, lr, lazy, output_scale, eval_points,
    tracked_points, ntk_points, float64, seed."""
    key = {**config, "data": load_mnist(verbose=False).source.split(" in ")[0], "device": device().type}
    return cached_run("03_centroid_ntk", key, lambda: _train(config))


def movement_window(steps: np.ndarray, change: np.ndarray, low: float = 0.1, high: float = 0.9
                    ) -> tuple[int, int]:
    """The steps at which a monotone-ish curve first reaches `low` and `high` of its final value:
    where most of the NTK's movement happens (for shading the figure)."""
    final = change[-1]
    first = lambda frac: int(steps[np.argmax(change >= frac * final)])  # noqa: E731
    return first(low), first(high)
