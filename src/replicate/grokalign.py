"""Chapter 04: GrokAlign (Jacobian regularisation) against weight decay alone.

Two experiments, each a training step plugged into the shared `train_loop`:
- MNIST in the Omnigrok setting (large initialisation, few training digits, AdamW): how many
  updates until held-out accuracy first exceeds a threshold, with and without the regulariser.
- XOR (the GrokAlign code's version of Xu et al.'s setup): two +-1 signal coordinates, y = x1 x2,
  and many small +-eps noise coordinates; robustness = accuracy when Gaussian noise is added to
  the noise coordinates.

The regulariser is lambda times the mean over (a subsample of) the batch of ||J(x)||_F, estimated
by random projections (`replicate.jacobian.grokalign_penalty`). With lambda = 0 it is not computed
at all, so a lambda = 0 run is exactly the baseline run.
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from . import jacobian
from .data import load_mnist, subset
from .models import MLP
from .runtime import device
from .training import cached_run, log_spaced_steps, train_loop

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def regularised_loss(model: nn.Module, x: torch.Tensor, task_loss: torch.Tensor, lam: float,
                     reg_points: int, projections: int, generator: torch.Generator) -> torch.Tensor:
    """task loss + lam * mean ||J||_F over the first `reg_points` points of the batch x."""
    if lam == 0:
        return task_loss
    points = x[:reg_points] if reg_points > 0 else x
    return task_loss + lam * jacobian.grokalign_penalty(model, points, projections, generator)


# ----------------------------------------------------------------------------------------------
# MNIST


def mnist_data(n_train: int, seed: int):
    """`n_train` normalised training digits (drawn with the seed) and the whole held-out set."""
    mnist = load_mnist(verbose=False)
    x, y = subset(mnist.train_x, mnist.train_y, n_train, seed)
    norm = lambda t: (t - MNIST_MEAN) / MNIST_STD  # noqa: E731
    return norm(x), y, norm(mnist.test_x), mnist.test_y


def task_loss(out: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "mse":  # against one-hot targets, summed over classes (Omnigrok)
        return ((out - nn.functional.one_hot(y, out.shape[1]).to(out.dtype)) ** 2).sum(1).mean()
    if kind == "ce":
        return nn.functional.cross_entropy(out, y)
    raise ValueError(f"loss must be 'mse' or 'ce', got {kind!r}")


def train_mnist(config: dict, data=None) -> dict:
    """One MNIST run; stops when held-out accuracy first exceeds `threshold` (checked every
    `eval_every` updates) or after `max_steps` updates. `config` keys: n_train, width, depth, bias,
    init_scale, lr, weight_decay, batch_size, loss, lam, reg_points, projections, max_steps,
    eval_every, threshold, jacobian_points, seed."""
    dev = device()
    train_x, train_y, test_x, test_y = (t.to(dev) for t in (data or mnist_data(config["n_train"], config["seed"])))
    torch.manual_seed(config["seed"])
    model = MLP(train_x.shape[1], config["width"], config["depth"], 10, bias=config["bias"],
                init_scale=config["init_scale"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    batches = torch.Generator().manual_seed(config["seed"] + 1)
    projections = torch.Generator().manual_seed(config["seed"] + 2)
    n, bs = len(train_y), config["batch_size"]
    order = torch.randperm(n, generator=batches)
    per_epoch = max(n // bs, 1)
    probe = train_x[:config["jacobian_points"]]  # fixed points for the diagnostics
    clock = {"train_seconds": 0.0, "train_cpu_seconds": 0.0, "steps": 0}
    log: dict[str, list] = {k: [] for k in ["step", "train_acc", "test_acc", "jacobian_norm",
                                            "alignment", "centroid"]}

    def step(t: int) -> float:
        nonlocal order
        start, cpu = time.perf_counter(), time.process_time()
        k = (t - 1) % per_epoch
        if k == 0 and t > 1:
            order = torch.randperm(n, generator=batches)
        idx = order[k * bs:(k + 1) * bs].to(dev)
        x = train_x[idx]
        fit = task_loss(model(x), train_y[idx], config["loss"])
        loss = regularised_loss(model, x, fit, config["lam"], config["reg_points"],
                                config["projections"], projections)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = fit.item()
        clock["train_seconds"] += time.perf_counter() - start
        clock["train_cpu_seconds"] += time.process_time() - cpu
        clock["steps"] = t
        return value

    def evaluate(t: int) -> dict:
        model.eval()
        with torch.no_grad():
            train_acc = (model(train_x).argmax(1) == train_y).float().mean().item()
            test_acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        stats = jacobian.centroid_statistics(model, probe)
        log["step"].append(t)
        log["train_acc"].append(train_acc)
        log["test_acc"].append(test_acc)
        log["jacobian_norm"].append(jacobian.frobenius_norm_exact(model, probe).mean().item())
        log["alignment"].append(stats["cosine"].mean().item())
        log["centroid"].append(jacobian.centroids(model, probe[:1])[0].cpu().numpy())
        model.train()
        return {"stop": test_acc > config["threshold"]}

    eval_steps = list(range(0, config["max_steps"] + 1, config["eval_every"]))
    train_loop(step, config["max_steps"], eval_steps, evaluate, desc=f"MNIST lambda={config['lam']:g}")
    reached = log["test_acc"][-1] > config["threshold"]
    result = {k: np.array(v) for k, v in log.items()}
    result.update(config=dict(config), reached=reached, steps_to_threshold=log["step"][-1] if reached else None,
                  digit=probe[0].cpu().numpy(), **clock)
    return result


def run_mnist(**config) -> dict:
    key = {**config, "data": load_mnist(verbose=False).source.split(" in ")[0], "device": device().type}
    return cached_run("04_grokalign_mnist", key, lambda: train_mnist(config))


def step_cost(config: dict, lam: float, repeats: int = 60) -> float:
    """Seconds per update for a given lambda: the fastest of `repeats` timed updates, after a
    warm-up. The minimum, not the mean, because on a shared machine every disturbance only adds
    time; it measures the regulariser's own cost directly rather than from whole runs."""
    dev = device()
    x, y, _, _ = mnist_data(config["n_train"], config["seed"])
    torch.manual_seed(config["seed"])
    model = MLP(784, config["width"], config["depth"], 10, bias=config["bias"],
                init_scale=config["init_scale"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    gen = torch.Generator().manual_seed(0)
    xb, yb = x[:config["batch_size"]].to(dev), y[:config["batch_size"]].to(dev)
    times = []
    for i in range(repeats + 10):
        start = time.perf_counter()
        loss = regularised_loss(model, xb, task_loss(model(xb), yb, config["loss"]), lam,
                                config["reg_points"], config["projections"], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - start)
    return float(np.min(times))


# ----------------------------------------------------------------------------------------------
# XOR


def xor_data(n: int, dim: int, eps: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n points in R^dim: two signal coordinates +-1, the rest +-eps; label y = x1 x2 in {-1, +1}."""
    signs = 2 * torch.randint(0, 2, (n, dim), generator=generator).float() - 1
    x = torch.cat([signs[:, :2], eps * signs[:, 2:]], dim=1)
    return x, x[:, 0] * x[:, 1]


def train_xor(config: dict) -> dict:
    """Full-batch SGD with weight decay on MSE, with or without GrokAlign; keys: n, dim, eps, width,
    lr, weight_decay, lam, steps, eval_points, amplitudes, seed."""
    dev = device()
    gen = torch.Generator().manual_seed(config["seed"])
    x, y = (t.to(dev) for t in xor_data(config["n"], config["dim"], config["eps"], gen))
    test_x, test_y = (t.to(dev) for t in xor_data(config["n"], config["dim"], config["eps"], gen))
    # One fixed draw of Gaussian noise on the noise coordinates, scaled by each amplitude.
    noise = torch.zeros_like(test_x)
    noise[:, 2:] = torch.randn(test_x.shape[0], test_x.shape[1] - 2, generator=gen).to(dev)
    torch.manual_seed(config["seed"])
    model = MLP(config["dim"], config["width"], 2, 1, bias=False).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    projections = torch.Generator().manual_seed(config["seed"] + 2)
    log: dict[str, list] = {k: [] for k in ["train_acc", "test_acc", "robust_acc", "centroid_norm",
                                            "alignment"]}

    def accuracy(inputs, labels):
        with torch.no_grad():
            return (torch.sign(model(inputs)[:, 0]) == labels).float().mean().item()

    def step(t: int) -> float:
        fit = ((model(x)[:, 0] - y) ** 2).mean()
        loss = regularised_loss(model, x, fit, config["lam"], 0, 1, projections)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return fit.item()

    def evaluate(t: int) -> dict:
        log["train_acc"].append(accuracy(x, y))
        log["test_acc"].append(accuracy(test_x, test_y))
        log["robust_acc"].append([accuracy(test_x + a * noise, test_y) for a in config["amplitudes"]])
        stats = jacobian.centroid_statistics(model, x)
        log["centroid_norm"].append(stats["norm"].mean().item())
        log["alignment"].append((stats["cosine"] * y).mean().item())  # label-signed
        return {}

    eval_steps = log_spaced_steps(config["steps"], config["eval_points"])
    train_loop(step, config["steps"], eval_steps, evaluate, desc=f"XOR lambda={config['lam']:g}")
    result = {k: np.array(v) for k, v in log.items()}
    result.update(eval_steps=np.array(eval_steps), config=dict(config))
    return result


def run_xor(**config) -> dict:
    return cached_run("04_grokalign_xor", {**config, "device": device().type}, lambda: train_xor(config))


def first_step(steps, values, level: float):
    """The first step at which `values` reaches `level`, or None."""
    hit = np.nonzero(np.asarray(values) >= level)[0]
    return int(np.asarray(steps)[hit[0]]) if len(hit) else None


# ----------------------------------------------------------------------------------------------
# Configurations from a chapter's parameters (shared by the notebook and any script, so that both
# hit the same run-cache entries).

MNIST_KEYS = ["seed", "n_train", "width", "depth", "bias", "init_scale", "lr", "weight_decay",
              "batch_size", "loss", "reg_points", "projections", "eval_every", "threshold",
              "jacobian_points"]


def mnist_config(params: dict, lam: float) -> dict:
    max_steps = params["baseline_max_steps"] if lam == 0 else params["grokalign_max_steps"]
    return {**{k: params[k] for k in MNIST_KEYS}, "lam": float(lam), "max_steps": max_steps}


def xor_config(params: dict, lam: float) -> dict:
    return {"seed": params["seed"], "n": params["xor_n"], "dim": params["xor_dim"], "eps": params["xor_eps"],
            "width": params["xor_width"], "lr": params["xor_lr"], "weight_decay": params["xor_weight_decay"],
            "lam": float(lam), "steps": params["xor_steps"], "eval_points": params["xor_eval_points"],
            "amplitudes": params["xor_amplitudes"]}


def measured_overhead(params: dict) -> dict:
    """Seconds per update without and with the regulariser (largest lambda), cached so that a
    re-execution shows the same numbers."""
    config = {**mnist_config(params, 0.0), "repeats": params["overhead_repeats"],
              "lam": float(max(params["lambdas"])), "statistic": "min"}

    def measure():
        base = step_cost(config, 0.0, config["repeats"])
        reg = step_cost(config, config["lam"], config["repeats"])
        return {"baseline_s": base, "grokalign_s": reg, "ratio": reg / base}
    return cached_run("04_grokalign_overhead", {**config, "device": device().type}, measure)
